# SPDX-License-Identifier: GPL-2.0
# What every vamr guest does at boot, shared by the one-node test guest
# (scripts/guest/init, started by scripts/run-guest.sh) and the two nodes
# (scripts/guest/node-init, scripts/run-pair.sh). Sourced, not run; only
# function definitions.
#
# Both boot the test kernel on the host's installed user space: the kernel
# mounts the host's root read-only over virtio-9p (mount tag /dev/root, as
# virtme-ng does) and runs the init script from the work tree there. The
# host's run directory of the boot (LOGDIR/run) is a second 9p share, tag
# "vamrrun", read-write, mounted at /run/vamr: guest.env there says where the
# work tree and the build directory are; the staged kernel modules are in
# its modroot/ (scripts/lib.sh, stage_guest_modules).
#
# Output for the host goes to file descriptor 3 (ttyS1), in sections:
#   ### BEGIN <kind> <name>        (kind: tap | kunit | demo | faultinj)
#   ...TAP / KTAP / text...
#   ### END <kind> <name> rc=<exit code>
#   # vamr-time <kind> <name> <seconds the section took>
# "# vamr-uptime <mark> <seconds since boot>" lines mark the phases; the set-up
# steps (step) end up in one TAP section (guest_finish), then
# "### GUEST DONE".

VAMR_RUN=/run/vamr
export VAMR_RUN

# guest_mounts: the kernel's file systems, tmpfs where the guest writes
# (/run, /tmp, /var/tmp, /root, /dev/shm; the host's /root stays reachable
# below /run/host-root until guest_run_dir); /etc becomes an overlay on
# tmpfs (guest_etc_overlay). Output channel: fd 3 on ttyS1.
guest_mounts() {
	# /usr/bin first (most commands), no /bin and /sbin (symlinks to the
	# /usr ones on Debian 12): a directory of PATH that lacks a command costs
	# a 9p lookup each time a shell looks for it.
	export PATH=/usr/bin:/usr/sbin
	export HOME=/root
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev 2>/dev/null
	mkdir -p /dev/pts /dev/shm
	mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
	mount -t tmpfs -o mode=1777 tmpfs /dev/shm
	mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
	mount -t tmpfs -o mode=0755 tmpfs /run
	mkdir -p /run/host-root
	mount --bind /root /run/host-root
	for _d in /tmp /var/tmp /root; do
		mount -t tmpfs -o mode=0755 tmpfs "$_d"
	done
	chmod 1777 /tmp /var/tmp
	chmod 0700 /root
	exec 3>/dev/ttyS1
	stty -F /dev/ttyS1 -onlcr 2>/dev/null
	: >/run/setup.tap
	uptime_mark init
}

# overlay_dir DIR: DIR writable, the host's DIR under a tmpfs overlay (or a
# copy of it on tmpfs when overlayfs refuses).
overlay_dir() {
	_o=/run/ovl$1
	mkdir -p "$_o/upper" "$_o/work"
	mount -t overlay overlay -o "lowerdir=$1,upperdir=$_o/upper,workdir=$_o/work" "$1" ||
		{ cp -a "$1" "$_o/copy" && mount --bind "$_o/copy" "$1"; }
}

out() { echo "$@" >&3; }

# uptime_mark NAME: "# vamr-uptime NAME <seconds since boot>" for the host.
uptime_mark() { out "# vamr-uptime $1 $(cut -d' ' -f1 /proc/uptime)"; }

# cpu_ticks: the guest's CPU time since boot, all CPUs, in USER_HZ ticks:
# "user system idle" (user with nice, system with irq and softirq, idle with
# iowait), from /proc/stat's first line.
cpu_ticks() { awk '/^cpu / { print $2 + $3, $4 + $7 + $8, $5 + $6; exit }' /proc/stat; }

# run_tap kind name command...: the command's output as one section, then
# the time it took: wall seconds, then the vCPU seconds spent in user space,
# in the kernel and idle meanwhile (all vCPUs). Under TCG a busy vCPU costs a
# host core and an idle one nothing, so user + sys is what the test costs the
# host.
run_tap() {
	_kind=$1 _name=$2
	shift 2
	read -r _t0 _ </proc/uptime
	_c0=$(cpu_ticks)
	out "### BEGIN $_kind $_name"
	"$@" >&3 2>&1
	_rc=$?
	out "### END $_kind $_name rc=$_rc"
	out "# vamr-time $_kind $_name $(awk -v t0="$_t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime)" \
		"$(echo "$_c0 $(cpu_ticks)" | awk -v hz="$(getconf CLK_TCK)" \
			'{ printf "cpu user %.1f sys %.1f idle %.1f", ($4 - $1) / hz, ($5 - $2) / hz, ($6 - $3) / hz }')"
	return $_rc
}

# step NAME command...: one set-up step, a TAP result of the set-up section.
step_n=0
step_fail=0
step() {
	_s=$1
	shift
	step_n=$((step_n + 1))
	if _msg=$("$@" 2>&1); then
		echo "ok $step_n $_s" >>/run/setup.tap
	else
		echo "not ok $step_n $_s # $(echo "$_msg" | tr '\n' ' ')" >>/run/setup.tap
		step_fail=1
	fi
}

# guest_run_dir: mount the run directory and read guest.env (VAMR_TOP,
# VAMR_BUILD, VAMR_KVER, VAMR_PROGS, ...). A work tree, build directory or
# program directory in the host's /root is bound at its place in the guest's
# /root (nothing else of the host's home: no dot files, no keys). Status 1
# when that fails.
guest_run_dir() {
	mkdir -p "$VAMR_RUN"
	step mount_run_dir mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 vamrrun "$VAMR_RUN"
	. "$VAMR_RUN/guest.env" || return 1
	for _p in "$VAMR_TOP" "$VAMR_BUILD" ${VAMR_PROGS:+"$VAMR_PROGS"}; do
		case "$_p" in
		/root/*)
			mountpoint -q "$_p" && continue
			step "host_path_${_p##*/}" sh -c "mkdir -p '$_p' && mount --bind '/run/host-root/${_p#/root/}' '$_p'"
			;;
		esac
	done
	umount -l /run/host-root
}

# guest_etc_overlay: the host's /etc with a tmpfs overlay (host name, hosts,
# shadow of the nodes). The guest's only RDMA devices are rxe and siw:
# libibverbs loads (dlopen) the provider of every .driver file in
# /etc/libibverbs.d in each process that lists devices, 17 of them on a
# Debian host, which costs each such process a lot of emulated time; the
# overlay keeps rxe's (and siw's) only.
guest_etc_overlay() {
	step etc_overlay overlay_dir /etc
	step ibverbs_rxe_provider_only sh -c 'test -f /etc/libibverbs.d/rxe.driver &&
		find /etc/libibverbs.d -name "*.driver" ! -name rxe.driver ! -name siw.driver -delete'
}

# guest_modules: modules from the run directory, never the host's
# /lib/modules: the test kernel's, vamr.ko and vamr_api_test.ko in extra/, the
# patched rdma_rxe in updates/ (which modprobe prefers; the stock one stays in
# kernel/), staged by the host with depmod run there. modprobe on PATH (a
# wrapper in /run/vamr-bin, first on PATH) and the kernel's module loader
# both use that tree. GUEST_MODULES: that tree's lib/modules/<release>.
guest_modules() {
	mkdir -p /run/vamr-bin
	printf '#!/bin/sh\nexec /sbin/modprobe -d %s "$@"\n' "$VAMR_RUN/modroot" >/run/vamr-bin/modprobe
	chmod 0755 /run/vamr-bin/modprobe
	export PATH=/run/vamr-bin:$PATH
	GUEST_MODULES=$VAMR_RUN/modroot/lib/modules/$(uname -r)
	step modules_from_run_dir sh -c 'echo /run/vamr-bin/modprobe >/proc/sys/kernel/modprobe'
	step kernel_release_matches test -d "$GUEST_MODULES"
}

# siw_staged: status 0 when the host staged the patched siw (updates/siw.ko,
# scripts/lib.sh's stage_guest_modules), as scripts/run-guest.sh and
# scripts/run-pair.sh see it when they give siw its NIC.
siw_staged() { [ -f "$VAMR_RUN/modroot/lib/modules/$(uname -r)/updates/siw.ko" ]; }

# guest_finish SECTION: the set-up steps as TAP section SECTION, the end
# marker, and power off (reboot(2) through busybox; QEMU runs with
# -no-reboot). PID 1 must not exit before: it would panic.
guest_finish() {
	uptime_mark done
	out "### BEGIN tap $1"
	echo "TAP version 13" >&3
	echo "1..$step_n" >&3
	cat /run/setup.tap >&3
	out "### END tap $1 rc=$step_fail"
	out "### GUEST DONE"
	sync
	/bin/busybox reboot -f
	while :; do /bin/busybox sleep 60; done
}

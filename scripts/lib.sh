# SPDX-License-Identifier: GPL-2.0
# Shared helpers for the vamr scripts. Sourced, not run.

# Build cache, kept outside the work tree so a fresh clone reuses it.
: "${VAMR_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/vamr}"
export VAMR_CACHE
# The work tree.
VAMR_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export VAMR_TOP
# Build outputs and guest logs of this work tree (VAMR_BUILD overrides).
: "${VAMR_BUILD:=$VAMR_TOP/build}"
export VAMR_BUILD
export PATH="$HOME/.cargo/bin:$PATH"
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
# LLVM= of the sanitizer kernel's build (build-kernel.sh --sanitize): Debian's
# clang-19, ld.lld-19, llvm-ar-19, ... (setup-host.sh --sanitize installs them).
VAMR_LLVM=-19

# The major version of the LLVM rustc is built on (22 for rustc 1.95). The
# benchmark kernel is built with LLVM=-<that version> (build-kernel.sh
# --bench; setup-host.sh --bench installs clang, lld and llvm of it):
# CONFIG_RUST_INLINE_HELPERS needs clang and rustc on one LLVM.
rustc_llvm_major() {
	rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p'
}

# The LLVM= setting a kernel tree was built with, as make arguments: none for
# the test kernel, "LLVM=-19" for the sanitizer kernel, "LLVM=-<rustc's LLVM>"
# for the benchmark kernel (each records it in .vamr-llvm). Modules must be
# built with the kernel's toolchain.
kbuild_llvm_args() {
	if [ -f "$1/.vamr-llvm" ]; then
		echo "LLVM=$(cat "$1/.vamr-llvm")"
	fi
}

# mirror_uri [security]: the Debian mirror of this machine's own apt sources
# (the first URIs: of debian.sources, or deb line of sources.list): the main
# archive, or with "security" the security archive.
mirror_uri() {
	local f=/etc/apt/sources.list.d/debian.sources uri="" neg='!'
	[ "${1:-}" = security ] && neg=''
	if [ -f "$f" ]; then
		uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ('"$neg"'($i ~ /security/)) { print $i; exit } }' "$f")
	fi
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" && '"$neg"'($2 ~ /security/) { print $2; exit }' /etc/apt/sources.list)
	fi
	[ -n "$uri" ] || die "cannot find the Debian ${1:-main} mirror URI in the apt sources"
	echo "$uri"
}

log() { printf '[vamr %(%T)T] %s\n' -1 "$*" >&2; }
die() { printf '[vamr] error: %s\n' "$*" >&2; exit 1; }

# The guests (scripts/run-guest.sh, scripts/run-pair.sh) boot the test kernel
# on the host's root file system, read-only over virtio-9p, with the run
# directory of the boot as a second, writable 9p share (tag vamrrun); their
# init scripts are scripts/guest/init and node-init, on
# scripts/guest/guest-lib.sh.

# A kernel tree of one of two kinds: one this project built
# (scripts/build-kernel.sh: its bzImage, its modules installed in .modinst),
# or the prepared headers of a distribution's kernel (scripts/distro.sh),
# whose file .vamr-stock names that kernel's own image and module tree:
#   image=/path/to/vmlinuz
#   modules=/path/to/lib/modules/<release>
#   vamr=/path/to/vamr.ko         (built against it)
#   rxe=/path/to/rdma_rxe.ko      (the patched rdma_rxe, built against it)
# stock_kernel_field KDIR FIELD prints a field of .vamr-stock.
stock_kernel_field() {
	sed -n "s/^$2=//p" "$1/.vamr-stock"
}

# guest_kernel_image KDIR: the kernel image the guests boot.
guest_kernel_image() {
	if [ -f "$1/.vamr-stock" ]; then
		stock_kernel_field "$1" image
	else
		echo "$1/arch/x86/boot/bzImage"
	fi
}

# guest_kernel_modules KDIR: the kernel's own module tree (lib/modules/<release>).
guest_kernel_modules() {
	if [ -f "$1/.vamr-stock" ]; then
		stock_kernel_field "$1" modules
	else
		echo "$1/.modinst/lib/modules/$(cat "$1/include/config/kernel.release")"
	fi
}

# guest_needs_initramfs KDIR: status 0 when the kernel has 9p as a module, so
# the guests boot through scripts/mkinitramfs.sh's initramfs.
guest_needs_initramfs() {
	grep -qx 'CONFIG_NET_9P_VIRTIO=m' "$1/.config"
}

# stage_guest_modules KDIR RUNDIR: the modules a guest loads, in
# RUNDIR/modroot/lib/modules/<release>: KDIR's own (the stock rdma_rxe in
# kernel/), vamr.ko, the kapi test module and the mirror test driver
# (tests/mirror) in extra/, the patched rdma_rxe
# (scripts/build-rxe.sh) and, when built, the patched siw
# (scripts/build-swdrv.sh) in updates/, which modprobe prefers; depmod run there.
# For a kernel with 9p as a module also RUNDIR/initramfs.gz (mkinitramfs.sh).
stage_guest_modules() {
	local kdir=$1 root=$2/modroot kver mods
	kver=$(cat "$kdir/include/config/kernel.release")
	mods=$root/lib/modules/$kver
	rm -rf "$root"
	mkdir -p "$root/lib/modules"
	cp -a "$(guest_kernel_modules "$kdir")" "$root/lib/modules/"
	rm -f "$mods/build" "$mods/source"
	mkdir -p "$mods/extra" "$mods/updates"
	if [ -f "$kdir/.vamr-stock" ]; then
		# Built against the distribution kernel by scripts/distro.sh.
		cp "$(stock_kernel_field "$kdir" vamr)" "$mods/extra/"
		cp "$(stock_kernel_field "$kdir" rxe)" "$mods/updates/"
	else
		cp "$VAMR_TOP/vamr.ko" "$mods/extra/"
		if [ -f "$VAMR_TOP/tests/kapi/vamr_api_test.ko" ]; then
			cp "$VAMR_TOP/tests/kapi/vamr_api_test.ko" "$mods/extra/"
		fi
		# The mirror API's test driver (tests/mirror), for the mirror guest.
		if [ -f "$VAMR_TOP/tests/mirror/vamr_mirror_edu.ko" ]; then
			cp "$VAMR_TOP/tests/mirror/vamr_mirror_edu.ko" "$mods/extra/"
		fi
		cp "$VAMR_BUILD/rxe/drivers/infiniband/sw/rxe/rdma_rxe.ko" "$mods/updates/"
		# The patched siw (scripts/build-swdrv.sh), when built for this kernel.
		local siw=$VAMR_BUILD/siw/drivers/infiniband/sw/siw/siw.ko
		if [ -f "$siw" ] && [ "$(modinfo -F vermagic "$siw" | cut -d' ' -f1)" = "$kver" ]; then
			cp "$siw" "$mods/updates/"
		fi
	fi
	depmod -b "$root" "$kver"
	grep -Eq '^updates/rdma_rxe\.ko(\.xz|\.zst|\.gz)?:.*extra/vamr\.ko' "$mods/modules.dep" ||
		die "depmod does not resolve the patched rdma_rxe (updates/) against vamr.ko"
	if guest_needs_initramfs "$kdir"; then
		"$VAMR_TOP/scripts/mkinitramfs.sh" "$root" "$kver" "$2/initramfs.gz" ||
			die "building the initramfs for $kdir failed"
	fi
}

# require_guest_visible DIR...: dies unless every DIR lies outside what the
# guests cover with tmpfs (/tmp, /var/tmp, /run, /dev): the guests run the
# host's user space and would not see it. prepare.sh checks the work tree and
# the build directory first thing, before any build.
require_guest_visible() {
	local d
	for d in "$@"; do
		case "$(realpath -m "$d")/" in
		/tmp/* | /var/tmp/* | /run/* | /dev/*)
			die "$d is under /tmp, /var/tmp, /run or /dev, which the guests cover with tmpfs: use another directory" ;;
		esac
	done
}

# guest_env KDIR RUNDIR [DIR...]: RUNDIR/guest.env, read by the guest
# (guest-lib.sh). The work tree, the build directory and the DIRs must be
# guest-visible (require_guest_visible).
guest_env() {
	require_guest_visible "$VAMR_TOP" "$VAMR_BUILD" "${@:3}"
	cat >"$2/guest.env" <<EOT
VAMR_TOP=$VAMR_TOP
VAMR_BUILD=$VAMR_BUILD
VAMR_KVER=$(cat "$1/include/config/kernel.release")
export VAMR_TOP VAMR_BUILD VAMR_KVER
EOT
}

# Mount options of the host root in the guest: read-only, so cache=loose
# (the guest caches file data and metadata and never asks the host again) is
# safe for the life of a boot; the run directory (shared, written by both
# sides) is mounted without a cache by guest-lib.sh.
VAMR_ROOTFLAGS=${VAMR_ROOTFLAGS:-trans=virtio,version=9p2000.L,msize=262144,cache=loose}

# guest_qemu TIMEOUT KDIR INIT RUNDIR NODELOGDIR APPEND QEMU-ARGS...: exec
# QEMU, killed after TIMEOUT seconds (timeout(1): status 124), on KDIR's kernel with the host root (init: INIT, a script of the work tree),
# RUNDIR as the share "vamrrun", the console on NODELOGDIR/console.log
# (ttyS0) and the sections on NODELOGDIR/results.log (ttyS1), QEMU's stderr in
# NODELOGDIR/qemu.log; APPEND goes to the kernel command line. TCG unless
# VAMR_ACCEL=kvm (the caller's choice; written to NODELOGDIR/accel).
guest_qemu() {
	local tmo=$1 kdir=$2 init=$3 run=$4 nlog=$5 append=$6 accel_opts
	shift 6
	if [ "${VAMR_ACCEL:-tcg}" = kvm ]; then
		accel_opts=(-accel kvm -cpu host)
	else
		# Every feature TCG has, but the fast string operations: with
		# ERMS/FSRM the kernel's memcpy, copy_*_user and clear_page and
		# glibc's large copies use REP MOVSB/STOSB, which TCG runs one byte
		# per iteration; without them they use 8-byte REP MOVSQ/STOSQ or
		# vector loops: about 12 % less host CPU for rdma_va alone.
		# On a KASAN kernel (the sanitizer run) also without LA57, i.e.
		# with 4-level paging: identify_cpu() clears boot_cpu_data's
		# feature bits and reads CPUID again while interrupts are on, and
		# pgtable_l5_enabled() is cpu_feature_enabled(X86_FEATURE_LA57), so
		# an interrupt in that window finds KASAN's shadow bounds computed
		# for 4-level paging and reports the 5-level direct map as a
		# wild-memory-access (in do_raw_spin_lock() from handle_edge_irq(),
		# 0.02 s into the boot), then in every later interrupt: 5 of 6 boots
		# of the 7.3 sanitizer kernel with LA57 (this model or plain max),
		# 0 of 4 without. VAMR_QEMU_CPU overrides the model.
		local cpu=max,erms=off,fsrm=off,fzrm=off,fsrs=off,fsrc=off
		grep -qx 'CONFIG_KASAN=y' "$kdir/.config" 2>/dev/null && cpu=$cpu,la57=off
		accel_opts=(-accel tcg,thread=multi -cpu "${VAMR_QEMU_CPU:-$cpu}")
	fi
	local initrd=()
	# Built by stage_guest_modules, once for the guests sharing RUNDIR.
	guest_needs_initramfs "$kdir" && initrd=(-initrd "$run/initramfs.gz")
	exec timeout -k 10 "$tmo" qemu-system-x86_64 "${accel_opts[@]}" \
		-kernel "$(guest_kernel_image "$kdir")" "${initrd[@]}" \
		-append "console=ttyS0 panic=-1 oops=panic root=/dev/root rootfstype=9p rootflags=$VAMR_ROOTFLAGS ro init=$init $append" \
		-fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap \
		-device virtio-9p-pci,fsdev=root,mount_tag=/dev/root \
		-fsdev local,id=run,path="$run",security_model=none,multidevs=remap \
		-device virtio-9p-pci,fsdev=run,mount_tag=vamrrun \
		-display none -monitor none -no-reboot \
		-serial "file:$nlog/console.log" -serial "file:$nlog/results.log" \
		"$@" </dev/null 2>"$nlog/qemu.log"
}

# qemu_aborted_in_boot NODELOGDIR: status 0 when QEMU itself stopped on one of
# its own assertions (a "qemu-system-...: ...: Assertion ... failed." line in
# NODELOGDIR/qemu.log) while the guest kernel was still booting, before it ran
# init (no "Run ... as init process" in console.log): nothing of vamr's had run
# (its modules load from init), so booting again tests the same thing. Seen
# with QEMU 10.0.2 under TCG: iotlb_to_section()'s assertion
# (system/physmem.c) while the kernel enumerated PCI.
qemu_aborted_in_boot() {
	grep -q '^qemu-system-[^:]*: .*Assertion .* failed' "$1/qemu.log" 2>/dev/null &&
		! grep -q 'Run .* as init process' "$1/console.log" 2>/dev/null
}

# guest_stopped_before_init NODELOGDIR: status 0 when a boot that failed never
# reached init (no "Run ... as init process" in console.log, and no output
# section in results.log): QEMU or the kernel stopped before anything of
# vamr's ran, so booting again tests the same thing. Its logs are kept
# (keep_aborted_logs) and summarized by scripts/collect-results.py.
guest_stopped_before_init() {
	! grep -q 'Run .* as init process' "$1/console.log" 2>/dev/null &&
		! grep -q '^### BEGIN' "$1/results.log" 2>/dev/null
}

# keep_aborted_logs NODELOGDIR: renames the logs of a boot that
# qemu_aborted_in_boot found aborted to *.log.aborted, before the boot again.
keep_aborted_logs() {
	local f
	for f in qemu console results; do
		[ ! -f "$1/$f.log" ] || mv "$1/$f.log" "$1/$f.log.aborted"
	done
}

# check_guest_kernel KDIR: the options the guests need (virtio, 9p root,
# overlay; scripts/kconfig/vamr-test.config), and sshd for the nodes.
# As modules (=m) they are loaded by the initramfs (guest_needs_initramfs).
check_guest_kernel() {
	local opt
	for opt in VIRTIO_PCI UNIX98_PTYS; do
		grep -qx "CONFIG_$opt=y" "$1/.config" ||
			die "$1 lacks CONFIG_$opt=y: rebuild it with scripts/build-kernel.sh (scripts/kconfig/vamr-test.config)"
	done
	for opt in VIRTIO_NET NET_9P_VIRTIO 9P_FS OVERLAY_FS; do
		grep -qx "CONFIG_$opt=[ym]" "$1/.config" ||
			die "$1 lacks CONFIG_$opt: rebuild it with scripts/build-kernel.sh (scripts/kconfig/vamr-test.config)"
	done
	[ -f "$(guest_kernel_image "$1")" ] || die "no kernel image for $1 ($(guest_kernel_image "$1"))"
}

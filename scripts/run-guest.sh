#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the test kernel on the host's user space under QEMU, with no NIC (but
# siw's, below), run
# the programs of a directory in it, and wait for it under a watchdog.
#
# usage: run-guest.sh KDIR MODE PROGDIR LOGDIR
#   MODE     test | demo (passed to the guest's init as vamr_guest_mode=):
#            test runs the set-up, every program of PROGDIR as a TAP section,
#            the KUnit collection, the unload phase and the stock-rxe
#            baseline (scripts/guest/init); demo runs each program of PROGDIR
#            as a demo section
#   PROGDIR  the programs (the selftests build, the examples, the benchmark)
#   LOGDIR   receives console.log (kernel console, ttyS0), results.log
#            (ttyS1), qemu.log (QEMU's own stderr), accel (the accelerator
#            used) and run/, the guest's run directory (guest.env, the staged
#            modules, sanitize.conf)
#
# The guest runs KDIR's kernel on the host's root file system, read-only over
# virtio-9p (mount tag /dev/root, init scripts/guest/init; scripts/lib.sh,
# guest_qemu), the way virtme-ng boots the host's user space, with tmpfs
# where it writes: any program installed on the host runs there unchanged.
# Its modules are KDIR's, vamr.ko, the kapi test module and the patched
# rdma_rxe, staged in LOGDIR/run/modroot (stage_guest_modules).
#
# VAMR_GUEST_CONF: a file copied into the run directory as sanitize.conf
# (test.sh --sanitize: the fault-injection settings; the guest then runs the
# sanitizer phases). Accelerator: TCG unless VAMR_ACCEL=kvm (or auto: KVM
# when /dev/kvm is usable and the KVM boot gets through, else TCG).
# VAMR_TIMEOUT (seconds, default 900) bounds each boot. VAMR_KERNEL_ARGS,
# when set, is appended to the kernel command line (test.sh --sanitize:
# kasan_multi_shot; scripts/soak.sh: vamr_fuzz_seconds=N, read by the guest's
# init). VAMR_GUEST_SMP: the guest's vCPUs (default 2; the tests need at
# least 2 for their races, scripts/bench.sh may ask for 1). For a guest of
# another kind (scripts/run-mirror.sh): VAMR_GUEST_INIT, its init script
# instead of scripts/guest/init; VAMR_GUEST_QEMU, more QEMU arguments
# (word-split: machine, devices); VAMR_GUEST_MEM, its memory (default 2G);
# VAMR_GUEST_APPEND, its kernel arguments instead of "numa=fake=2". Exit status: 0
# when the guest reached its end marker, 124 on a watchdog timeout, 1
# otherwise.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ $# = 4 ] || die "usage: run-guest.sh KDIR MODE PROGDIR LOGDIR"
kdir=$1 mode=$2 progdir=$(realpath "$3") logdir=$4
timeout_s=${VAMR_TIMEOUT:-900}
check_guest_kernel "$kdir"
[ -d "$progdir" ] || die "no directory $progdir"
mkdir -p "$logdir"
run=$(realpath "$logdir")/run
rm -rf "$run"
mkdir -p "$run"
stage_guest_modules "$kdir" "$run"
guest_env "$kdir" "$run" "$progdir"
printf 'VAMR_PROGS=%q\nexport VAMR_PROGS\n' "$progdir" >>"$run/guest.env"
# The patched siw, when staged, gets a NIC of its own in the test guest: a
# virtio-net (the MAC scripts/guest/init looks for) on a QEMU hub with no
# other port, so no frame leaves the guest; loopback traffic between its
# addresses never reaches it. (The RDMA CM does not take an iWARP device on
# lo, whose hardware address is zero.)
siw_nic=()
if [ -z "${VAMR_GUEST_INIT:-}" ] && ls "$run"/modroot/lib/modules/*/updates/siw.ko* >/dev/null 2>&1; then
	siw_nic=(-netdev hubport,id=siwnet,hubid=0 -device virtio-net-pci,netdev=siwnet,mac=52:54:00:73:69:77)
fi
if [ -n "${VAMR_GUEST_CONF:-}" ]; then
	cp "$VAMR_GUEST_CONF" "$run/sanitize.conf"
fi

boot() { # accel timeout-seconds
	local accel=$1 tmo=$2
	rm -f "$logdir"/console.log "$logdir"/results.log
	echo "$accel" >"$logdir/accel"
	log "booting the test kernel ($accel, mode $mode, watchdog ${tmo}s)"
	local rc=0
	# The group's stderr also takes bash's report of a QEMU killed by a signal.
	# shellcheck disable=SC2086 # VAMR_GUEST_QEMU is a list of arguments
	(VAMR_ACCEL=$accel guest_qemu "$tmo" "$kdir" "${VAMR_GUEST_INIT:-$VAMR_TOP/scripts/guest/init}" \
		"$run" "$logdir" \
		"${VAMR_GUEST_APPEND-numa=fake=2} vamr_guest_mode=$mode${VAMR_KERNEL_ARGS:+ $VAMR_KERNEL_ARGS}" \
		-smp "${VAMR_GUEST_SMP:-2}" -m "${VAMR_GUEST_MEM:-2G}" -nic none "${siw_nic[@]}" ${VAMR_GUEST_QEMU:-}) \
		2>>"$logdir/qemu.log" || rc=$?
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		log "watchdog: the guest did not finish within ${tmo}s"
		return 124
	fi
	grep -q '^### GUEST DONE' "$logdir/results.log" 2>/dev/null || return 1
	return 0
}

# TCG by default: nested KVM is broken on this project's machines (it fails
# with an MSR error, or hangs until a watchdog when arch-capabilities are
# hidden), and a KVM try costs minutes before it falls back. VAMR_ACCEL=kvm
# asks for KVM; VAMR_ACCEL=auto tries it for 120 s and falls back to TCG.
accel=${VAMR_ACCEL:-tcg}
if [ "$accel" = auto ]; then
	if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
		if boot kvm $((timeout_s < 120 ? timeout_s : 120)); then
			exit 0
		fi
		log "KVM boot did not complete ($(grep -m1 -v -e '^/' -e '^$' "$logdir/qemu.log" 2>/dev/null)); falling back to TCG"
	fi
	accel=tcg
fi
rc=0
boot "$accel" "$timeout_s" || rc=$?
# A boot that stopped before init ran (qemu_aborted_in_boot,
# guest_stopped_before_init: nothing of vamr's had run): once
# more, keeping the first attempt's logs beside the new ones.
if [ "$rc" != 0 ] && { qemu_aborted_in_boot "$logdir" || guest_stopped_before_init "$logdir"; }; then
	log "the guest stopped before init ran (QEMU: $(grep -m1 -v '^$' "$logdir/qemu.log" 2>/dev/null || echo nothing); kernel: $(tail -n1 "$logdir/console.log" 2>/dev/null)); booting once more (first attempt: $logdir/*.aborted)"
	keep_aborted_logs "$logdir"
	rc=0
	boot "$accel" "$timeout_s" || rc=$?
fi
exit "$rc"

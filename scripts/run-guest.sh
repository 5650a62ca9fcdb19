#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the test kernel with an initramfs under QEMU, with no NIC, and wait
# for it under a watchdog.
#
# usage: run-guest.sh KDIR INITRAMFS MODE LOGDIR
#   MODE    test | demo (passed to the guest's /init as vamr_guest_mode=)
#   LOGDIR  receives console.log (kernel console, ttyS0), results.log (ttyS1),
#           qemu.log (QEMU's own stderr) and accel (the accelerator used)
#
# Accelerator: TCG unless VAMR_ACCEL=kvm (or auto: KVM when /dev/kvm is usable
# and the KVM boot gets through, else TCG). VAMR_TIMEOUT (seconds, default
# 900) bounds each boot. VAMR_KERNEL_ARGS, when set, is appended to the
# kernel command line (test.sh --sanitize: kasan_multi_shot; scripts/soak.sh:
# vamr_fuzz_seconds=N, read by the guest's /init). Exit status:
# 0 when the guest reached its end marker, 124 on a watchdog timeout, 1
# otherwise.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

kdir=$1 initrd=$2 mode=$3 logdir=$4
timeout_s=${VAMR_TIMEOUT:-900}
mkdir -p "$logdir"

boot() { # accel timeout-seconds
	local accel=$1 tmo=$2 accel_opts
	if [ "$accel" = kvm ]; then
		accel_opts=(-accel kvm -cpu host)
	else
		accel_opts=(-accel tcg,thread=multi -cpu max)
	fi
	rm -f "$logdir"/console.log "$logdir"/results.log
	echo "$accel" >"$logdir/accel"
	log "booting the test kernel ($accel, mode $mode, watchdog ${tmo}s)"
	local rc=0
	# The group's stderr also takes bash's report of a QEMU killed by a signal.
	{ timeout -k 10 "$tmo" qemu-system-x86_64 \
		"${accel_opts[@]}" -smp 2 -m 2G \
		-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" \
		-append "console=ttyS0 panic=-1 oops=panic numa=fake=2 vamr_guest_mode=$mode${VAMR_KERNEL_ARGS:+ $VAMR_KERNEL_ARGS}" \
		-nic none -display none -monitor none -no-reboot \
		-serial "file:$logdir/console.log" -serial "file:$logdir/results.log" \
		</dev/null; } 2>"$logdir/qemu.log" || rc=$?
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
exit "$rc"

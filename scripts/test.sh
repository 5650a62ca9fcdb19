#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Run every test: build what is needed (scripts/prepare.sh), boot the test
# kernel under QEMU, run the KUnit suites (at vamr.ko load) and the
# kselftest-style programs in the guest, and print one line per test and
#   N passed, N failed, N skipped
# Exit status 0 only when everything passed and the kernel log is clean.
# Logs: build/logs/test/{console,results,qemu}.log
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kdir=$("$here/prepare.sh")
logdir="$VAMR_BUILD/logs/test"
mkdir -p "$VAMR_BUILD" "$VAMR_BUILD/nodemo"
"$here/build-initramfs.sh" "$kdir" "$VAMR_BUILD/initramfs-test.cpio.gz" \
	"$VAMR_BUILD/selftests" "$VAMR_BUILD/nodemo"
guest_rc=0
"$here/run-guest.sh" "$kdir" "$VAMR_BUILD/initramfs-test.cpio.gz" test "$logdir" || guest_rc=$?
[ "$guest_rc" = 0 ] || log "guest run ended with status $guest_rc; see $logdir/console.log"
"$here/collect-results.py" "$logdir"

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Soak test: run the fuzzer (tests/selftests/rdma_fuzz.c) alone in the test
# guest for a long time, then print what it did and the usual verdict.
#
# usage: soak.sh [--minutes N] [--seed S] [--exclude KIND[,KIND...]]
#   --minutes  fuzzing time (default 30)
#   --seed     the fuzzer's seed (default: chosen by the fuzzer, printed)
#   --exclude  operation kinds to leave out (rdma_fuzz -l lists them)
#
# The guest gets vamr_fuzz_seconds=/vamr_fuzz_seed=/vamr_fuzz_exclude= on its
# kernel command line (VAMR_KERNEL_ARGS), which its /init
# exports as VAMR_FUZZ_*; the host watchdog (VAMR_TIMEOUT) is set to the fuzzing time
# plus 10 minutes unless given. Logs: build/logs/soak/. Exit status: that
# of collect-results.py (0 only when every check passed and the kernel log
# is clean).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

minutes=30 seed="" exclude=""
while [ $# -gt 0 ]; do
	case "$1" in
	--minutes) minutes=${2:?}; shift 2 ;;
	--seed) seed=${2:?}; shift 2 ;;
	--exclude) exclude=${2:?}; shift 2 ;;
	-h | --help) sed -n '4,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
case "$minutes" in '' | *[!0-9]*) die "--minutes takes a whole number" ;; esac
case "$seed" in *[!0-9]*) die "--seed takes a decimal number" ;; esac
case "$exclude" in *[!a-z0-9_,*]*) die "--exclude takes kind names separated by commas" ;; esac

kdir=$("$here/prepare.sh")
testdir="$VAMR_BUILD/soak-tests"
logdir="$VAMR_BUILD/logs/soak"
rm -rf "$testdir"
mkdir -p "$testdir"
cp "$VAMR_BUILD/selftests/rdma_fuzz" "$testdir/"

seconds=$((minutes * 60))
# (run-guest.sh boots with numa=fake=2: the fuzzer's move_pages() migrates pages.)
append="vamr_fuzz_seconds=$seconds"
[ -z "$seed" ] || append+=" vamr_fuzz_seed=$seed"
[ -z "$exclude" ] || append+=" vamr_fuzz_exclude=$exclude"
export VAMR_KERNEL_ARGS="$append"
export VAMR_TIMEOUT=${VAMR_TIMEOUT:-$((seconds + 600))}
log "soak: $minutes min of rdma_fuzz ($append), watchdog ${VAMR_TIMEOUT}s"
guest_rc=0
"$here/run-guest.sh" "$kdir" test "$testdir" "$logdir" || guest_rc=$?
[ "$guest_rc" = 0 ] || log "guest run ended with status $guest_rc; see $logdir/console.log"

# What the fuzzer said besides its progress lines: seed, violations, hangs,
# the operations per kind and the teardown.
tr -d '\r' <"$logdir/results.log" 2>/dev/null |
	awk '/^### BEGIN tap rdma_fuzz/ { on = 1; next } /^### END tap rdma_fuzz/ { on = 0 }
	     on && /^#/ && !/^# progress/' || true
"$here/collect-results.py" "$logdir" --tests rdma_fuzz --guest-rc "$guest_rc" --kconfig "$kdir/.config"

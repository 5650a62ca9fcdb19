#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build everything for the benchmark kernel (scripts/prepare.sh --bench: no
# lockdep, DEBUG_VM, KUnit), boot it under QEMU with perf in the image, run
# tests/bench/vamr_bench once and print its table: normal vs ODP vs VA MRs,
# side by side in one guest run. Documentation/bench-results.rst explains
# the rows and keeps the last figures. Numbers from a TCG guest are emulated
# time: compare the rows of one run with each other, not with hardware.
#
# usage: bench.sh [--doc] [ROUNDS]    (default 5; cells are median [min..max]
#                                      of ROUNDS)
#   --doc  also writes the table, with the kernel, commit and rounds it ran
#          with, into the "Figures" section of Documentation/bench-results.rst
#          (between its bench-table markers); only for a run of every phase.
#
# Exit status: 0 when the benchmark ran through; non-zero when a build, the
# guest, a verbs call or a transfer on a normal or VA MR failed. Numbers are
# never judged. Logs: build/logs/bench/ (results.log has the "# ..." progress
# lines and timings of each phase). VAMR_TIMEOUT (default 1800 s) bounds the
# guest; VAMR_KDIR=dir benchmarks on another built kernel tree (e.g. the test
# kernel) instead of the benchmark kernel; VAMR_BENCH_PHASES=reg,first,tput,
# remap,cpu,inval,live runs only those parts (for working on the benchmark).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

doc=0
if [ "${1:-}" = --doc ]; then
	doc=1
	shift
	[ -z "${VAMR_BENCH_PHASES:-}" ] || die "--doc writes a whole table: unset VAMR_BENCH_PHASES"
fi
rounds=${1:-5}
case "$rounds" in
'' | *[!0-9]*) die "usage: bench.sh [--doc] [ROUNDS]" ;;
esac
[ "$rounds" -ge 1 ] && [ "$rounds" -le 32 ] || die "ROUNDS must be 1..32"

kdir=$("$here/prepare.sh" --bench)
logdir="$VAMR_BUILD/logs/bench"
# The guest runs on the host's user space: perf for the rxe CPU-share column
# is the host's /usr/bin/perf (setup-host.sh --bench installs linux-perf).
guest_rc=0
VAMR_TIMEOUT=${VAMR_TIMEOUT:-1800} VAMR_KERNEL_ARGS="vamr_bench_rounds=$rounds${VAMR_BENCH_PHASES:+ vamr_bench_phases=$VAMR_BENCH_PHASES}${VAMR_KERNEL_ARGS:+ $VAMR_KERNEL_ARGS}" \
	"$here/run-guest.sh" "$kdir" demo "$VAMR_BUILD/bench" "$logdir" || guest_rc=$?
log "kernel: $kdir ($(cat "$kdir/include/config/kernel.release"))"
# The table: the demo section without its "# " progress lines; the guest's
# set-up steps must all have passed.
awk '/^### BEGIN demo/ { on = 1; next }
     /^### END demo/ { on = 0; if ($5 != "rc=0") { print "(vamr_bench exit " $5 ")"; bad = 1 } next }
     /^### BEGIN tap guest_setup/ { setup = 1; next }
     /^### END tap guest_setup/ { setup = 0; next }
     setup && /^not ok/ { print "guest set-up failed: " $0; bad = 1 }
     on && !/^# / { print }
     on && /^# FAIL/ { print }
     END { exit bad }' <(tr -d '\r' <"$logdir/results.log" 2>/dev/null) >"$logdir/table.txt" || {
	cat "$logdir/table.txt"
	log "the benchmark failed; see $logdir"
	exit 1
}
cat "$logdir/table.txt"
[ "$guest_rc" = 0 ] || { log "guest run ended with status $guest_rc; see $logdir/console.log"; exit 1; }
if [ "$doc" = 1 ]; then
	doc_file=$VAMR_TOP/Documentation/bench-results.rst
	head="scripts/bench.sh $rounds on $(basename "$kdir") ($(cat "$kdir/include/config/kernel.release")), vamr $(git -C "$VAMR_TOP" describe --always --dirty 2>/dev/null || echo '(no git)'), $(date -u +%Y-%m-%d)"
	python3 - "$doc_file" "$logdir/table.txt" "$head" <<-'PY' || die "could not update $doc_file"
		import sys
		doc, table, head = sys.argv[1], open(sys.argv[2]).read().rstrip("\n"), sys.argv[3]
		text = open(doc).read()
		begin, end = ".. bench-table-begin\n", ".. bench-table-end\n"
		i, j = text.index(begin) + len(begin), text.index(end)
		body = "\n" + head + "::\n\n" + "\n".join(("    " + l).rstrip() for l in table.splitlines()) + "\n\n"
		open(doc, "w").write(text[:i] + body + text[j:])
	PY
	log "table written into $doc_file"
fi

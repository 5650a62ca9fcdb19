#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job: build everything (scripts/prepare.sh); boot two node guests
# joined by a private link (scripts/run-pair.sh) and run an MPI program across
# them with Open MPI and UCX, with stock MRs and with VA MRs, printing the
# table side by side (logs: build/logs/pair-run/); then boot the one-node
# test guest, load vamr and rdma_rxe, and run the demo programs of examples/,
# printing what they print (logs: build/logs/examples/).
#
# usage: run.sh [examples|bench]   (bench: scripts/bench.sh, on the
#                                   benchmark kernel)
#
# The guests boot Debian's stock kernel (linux-image-7.3.4+deb13-amd64,
# unmodified, from apt), with vamr.ko and the patched rdma_rxe built against
# it in a trixie chroot by Debian's rustc (prepare.sh --distro,
# scripts/distro.sh): no kernel is compiled. VAMR_KERNEL=test boots the
# debug test kernel instead (scripts/build-kernel.sh, as scripts/test.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

what=${1:-examples}
case "$what" in
examples) ;;
bench) exec "$here/bench.sh" ;;
*) die "usage: run.sh [examples|bench]" ;;
esac
case "${VAMR_KERNEL:-distro}" in
distro) kdir=$("$here/prepare.sh" --distro) ;;
test) kdir=$("$here/prepare.sh") ;;
*) die "VAMR_KERNEL=${VAMR_KERNEL} (distro or test)" ;;
esac
# The release each guest booted, from its kernel's banner.
booted() { # console.log
	sed -n 's/.*Linux version \([^ ]*\) .*/\1/p' "$1" | head -n1
}

# Two nodes first: Open MPI + UCX across them, stock MRs and VA MRs side by
# side (tests/pair/node-a.sh, section mpi_remap; Documentation/two-nodes.rst).
pairlog="$VAMR_BUILD/logs/pair-run"
pair_tests="pair_link mpi_remap"
pair_rc=0
# 4 MiB per iteration here (the README's table); scripts/test.sh moves 1 MiB
# (tests/pair/node-a.sh's default), which shows the same with a quarter of
# the emulated traffic.
VAMR_PAIR_TESTS=$pair_tests VAMR_TIMEOUT=${VAMR_PAIR_TIMEOUT:-900} VAMR_MPI_MIB=${VAMR_MPI_MIB:-4} \
	"$here/run-pair.sh" "$kdir" "$pairlog" ". $top/tests/pair/node-a.sh" ". $top/tests/pair/node-b.sh" ||
	pair_rc=$?
mpi_rc=0
"$here/collect-results.py" - --pair "$pairlog" --pair-tests "$pair_tests" --pair-rc "$pair_rc" \
	>"$pairlog/summary.txt" || mpi_rc=$?
echo "== two nodes: node a ran $(booted "$pairlog/a/console.log"), node b $(booted "$pairlog/b/console.log")"
grep -v -e '^PASS  ' -e '^SKIP  ' -e '^setup (' -e '^two-node (' "$pairlog/summary.txt"
[ "$mpi_rc" = 0 ] || log "the two-node MPI run failed; see $pairlog/summary.txt and $pairlog/{a,b}"

logdir="$VAMR_BUILD/logs/$what"
guest_rc=0
"$here/run-guest.sh" "$kdir" demo "$VAMR_BUILD/$what" "$logdir" || guest_rc=$?
echo "== one node: $(booted "$logdir/console.log")"
# Show the demo sections and the guest's set-up steps.
awk '/^### BEGIN demo/ { on = 1; print "== " $4; next }
     /^### END demo/ { on = 0; if ($5 != "rc=0") { print "   (exit " $5 ")"; bad = 1 } next }
     /^### BEGIN tap guest_setup/ { setup = 1; next }
     /^### END tap guest_setup/ { setup = 0; next }
     setup && /^not ok/ { print "guest set-up failed: " $0; bad = 1 }
     on { print }
     END { exit bad }' <(tr -d '\r' <"$logdir/results.log") || { log "the demo failed; see $logdir"; exit 1; }
[ "$guest_rc" = 0 ] || { log "guest run ended with status $guest_rc; see $logdir/console.log"; exit 1; }
[ "$mpi_rc" = 0 ] || exit 1

# SPDX-License-Identifier: GPL-2.0
# Node b of the two-node tests (scripts/run-pair.sh; sourced by
# scripts/guest/node-init with scripts/guest/node-lib.sh): prints its GID
# table, runs the section movable (below), says it is ready, and serves until
# node a is done: sshd runs (Open MPI's mpirun starts the remote rank over
# ssh), and node a's commands (va_mr, the rping, perftest and rdma_remote
# servers) come through the run directory (serve_commands,
# scripts/guest/node-lib.sh). The watchdog of run-pair.sh bounds the wait.
run_tap demo gid_table_b gid_table rxe0
# movable: VA MRs over memory in ZONE_MOVABLE (tests/selftests/rdma_movable.c),
# here because node b boots with movablecore= (scripts/run-pair.sh) and the
# one-node guest without: over loopback, on a second rxe device bound to lo
# (rdma_pair's ::ffff:127.0.0.1 GID), before node a starts its tests.
case " ${VAMR_PAIR_TESTS:-movable} " in
*" movable "*)
	rdma link add rxelo type rxe netdev lo
	VAMR_IBDEV=rxelo run_tap tap movable "$VAMR_BUILD/selftests/rdma_movable"
	rdma link delete rxelo
	;;
esac
flag ready_b
serve_commands

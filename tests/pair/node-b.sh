# SPDX-License-Identifier: GPL-2.0
# Node b of the two-node tests (scripts/run-pair.sh; sourced by
# scripts/guest/node-init with scripts/guest/node-lib.sh): prints its GID
# table, says it is ready, and serves (sshd runs; node a starts the MPI
# rank, rping, perftest and rdma_remote servers here over ssh) until node a
# is done.
run_tap demo gid_table_b gid_table rxe0
flag ready_b
wait_flag done_a "${VAMR_PAIR_WAIT:-1500}" || out "# node b: node a never said it was done"

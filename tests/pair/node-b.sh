# SPDX-License-Identifier: GPL-2.0
# Node b of the two-node tests (scripts/run-pair.sh; sourced by
# scripts/guest/node-init with scripts/guest/node-lib.sh): prints its GID
# table, says it is ready, and serves until node a is done: sshd runs (Open
# MPI's mpirun starts the remote rank over ssh), and node a's commands (va_mr,
# the rping, perftest and rdma_remote servers) come through the run directory
# (serve_commands, scripts/guest/node-lib.sh). The watchdog of run-pair.sh
# bounds the wait.
run_tap demo gid_table_b gid_table rxe0
flag ready_b
serve_commands

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Run the benchmarks of tests/bench in the test guest and print their tables
# (normal vs ODP vs VA MRs on rxe). Numbers from a TCG guest are emulated
# time: compare the rows with each other, not with hardware.
exec "$(dirname "$0")/run.sh" bench

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build rdma_rxe with VA-semantics MRs out of tree: KDIR's own rxe sources
# with patches/rxe/*.patch applied, built against KDIR and vamr.ko's
# Module.symvers (scripts/build-swdrv.sh KDIR rxe does the work).
#
# usage: build-rxe.sh KDIR     (vamr.ko must be built first)
# Output: $VAMR_BUILD/rxe/drivers/infiniband/sw/rxe/rdma_rxe.ko, a module that
# loads in place of the stock rdma_rxe (and needs vamr.ko loaded).
set -euo pipefail
[ $# = 1 ] || { echo "usage: build-rxe.sh KDIR" >&2; exit 1; }
exec "$(cd "$(dirname "$0")" && pwd)/build-swdrv.sh" "$1" rxe

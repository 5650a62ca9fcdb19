#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build everything the guest runs, from a fresh machine or a warm cache:
# host packages and kernel source (setup-host.sh), the test kernel
# (build-kernel.sh, cached), vamr.ko, the selftests and the examples.
# Prints the kernel build directory (KDIR) on stdout.
#
# usage: prepare.sh [--sanitize | --bench]
#   --sanitize  the same against the sanitizer kernel (build-kernel.sh
#               --sanitize); modules are then built with its LLVM toolchain.
#   --bench     for scripts/bench.sh: the benchmark kernel (build-kernel.sh
#               --bench: no lockdep, DEBUG_VM, KUnit), vamr.ko, the kapi test
#               module and the patched rxe against it, and tests/bench (no
#               selftests, no examples); setup-host.sh --bench adds perf.
#
# VAMR_KDIR=dir uses that built kernel tree instead of build-kernel.sh (for
# trying the scripts against another tree; the cached build is not touched).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

variant=()
for arg in "$@"; do
	case "$arg" in
	--sanitize) variant=(--sanitize) ;;
	--bench) variant=(--bench) ;;
	*) die "usage: prepare.sh [--sanitize | --bench]" ;;
	esac
done

"$here/setup-host.sh" "${variant[@]}" >&2
if [ -n "${VAMR_KDIR:-}" ]; then
	[ -f "$VAMR_KDIR/.vamr-built" ] || die "VAMR_KDIR=$VAMR_KDIR is not a built kernel tree (no .vamr-built)"
	kdir=$VAMR_KDIR
	log "using the kernel tree VAMR_KDIR=$kdir"
else
	kdir=$("$here/build-kernel.sh" "${variant[@]}")
fi
# LLVM=... when KDIR was built with LLVM (the sanitizer kernel), else nothing.
read -r -a llvm <<<"$(kbuild_llvm_args "$kdir")"
log "building vamr.ko against $kdir"
make -s -C "$top" KDIR="$kdir" "${llvm[@]}" modules >&2
# The test consumer of the in-kernel API, linked against vamr.ko's exports.
make -s -C "$kdir" M="$top/tests/kapi" KBUILD_EXTRA_SYMBOLS="$top/Module.symvers" "${llvm[@]}" modules >&2
# rdma_rxe with VA-semantics MRs: KDIR's rxe sources + patches/rxe.
"$here/build-rxe.sh" "$kdir"
if [ "${variant[*]}" = --bench ]; then
	log "building the benchmarks"
	make -s -C "$top/tests/bench" OUT="$VAMR_BUILD/bench" >&2
	echo "$kdir"
	exit 0
fi
log "building selftests and examples"
make -s -C "$top/tests/selftests" KDIR="$kdir" OUT="$VAMR_BUILD/selftests" >&2
make -s -C "$top/examples" KDIR="$kdir" OUT="$VAMR_BUILD/examples" >&2
make -s -C "$top/tests/bench" OUT="$VAMR_BUILD/bench" >&2
# vamrctl: first on PATH in the test guest (scripts/guest/init).
make -s -C "$top/tools/vamrctl" OUT="$VAMR_BUILD/tools" >&2
# libvamr-preload.so (LD_PRELOAD: VA MRs for unmodified programs); the guests
# use it from the build directory (VAMR_PRELOAD of scripts/guest/init).
make -s -C "$top/tools/preload" OUT="$VAMR_BUILD/tools" >&2
# The two-node programs (scripts/run-pair.sh): the MPI program, built with
# Debian's Open MPI, and rdma_remote (rdma_cm).
make -s -C "$top/tests/mpi" OUT="$VAMR_BUILD/mpi" >&2
make -s -C "$top/tests/pair" OUT="$VAMR_BUILD/pair" >&2
echo "$kdir"

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build everything the guest runs, from a fresh machine or a warm cache:
# host packages and kernel source (setup-host.sh), the test kernel
# (build-kernel.sh, cached), vamr.ko, the selftests, the examples and
# tests/mirror (the mirror API's test driver and its selftests).
# Prints the kernel build directory (KDIR) on stdout.
#
# usage: prepare.sh [--kernel] [--sanitize | --bench | --distro]
#   --kernel    only the host set-up and the kernel: prints KDIR and stops
#               (test.sh starts the host checks on it while the rest builds).
#   --distro    Debian's stock kernel instead, no kernel compiled
#               (scripts/distro.sh: its image and modules from apt, vamr.ko
#               and the patched rxe built in a trixie chroot by Debian's
#               rustc); KDIR is then the regenerated headers tree, with
#               .vamr-stock naming the image and the modules (scripts/lib.sh).
#   --sanitize  the same against the sanitizer kernel (build-kernel.sh
#               --sanitize); modules are then built with its LLVM toolchain.
#   --bench     for scripts/bench.sh: the benchmark kernel (build-kernel.sh
#               --bench: no lockdep, DEBUG_VM, KUnit), vamr.ko, the kapi test
#               module and the patched rxe against it, and tests/bench (no
#               selftests, no examples); setup-host.sh --bench adds perf.
#
# Every make runs with -j<cores> (unless MAKEFLAGS already sets -j), and the
# user-space programs build at the same time as the modules: the modules'
# chain (vamr.ko's Rust crate, then the kapi module and rxe, which need its
# Module.symvers) leaves a core idle much of the time.
#
# VAMR_KDIR=dir uses that built kernel tree instead of build-kernel.sh (for
# trying the scripts against another tree; the cached build is not touched).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

variant=()
kernel_only=0
for arg in "$@"; do
	case "$arg" in
	--kernel) kernel_only=1 ;;
	--sanitize) variant=(--sanitize) ;;
	--bench) variant=(--bench) ;;
	--distro) variant=(--distro) ;;
	*) die "usage: prepare.sh [--kernel] [--sanitize | --bench | --distro]" ;;
	esac
done

# Before the kernel build (minutes): a work tree the guests cannot see.
require_guest_visible "$top" "$VAMR_BUILD"
if [ "${variant[*]}" = --distro ]; then
	"$here/setup-host.sh" >&2
else
	"$here/setup-host.sh" "${variant[@]}" >&2
fi
if [ "${variant[*]}" = --distro ]; then
	kdir=$("$here/distro.sh")
elif [ -n "${VAMR_KDIR:-}" ]; then
	[ -f "$VAMR_KDIR/.vamr-built" ] || die "VAMR_KDIR=$VAMR_KDIR is not a built kernel tree (no .vamr-built)"
	kdir=$VAMR_KDIR
	log "using the kernel tree VAMR_KDIR=$kdir"
else
	kdir=$("$here/build-kernel.sh" "${variant[@]}")
fi
if [ "$kernel_only" = 1 ]; then
	echo "$kdir"
	exit 0
fi
case " ${MAKEFLAGS:-} " in
*" -j"* | *" --jobs"*) ;;
*) export MAKEFLAGS="${MAKEFLAGS:+$MAKEFLAGS }-j$(nproc)" ;;
esac
# User space, built while the modules build (below). Nothing in it needs them.
user_space() {
	if [ "${variant[*]}" = --bench ]; then
		log "building the benchmarks"
		make -s -C "$top/tests/bench" OUT="$VAMR_BUILD/bench" >&2
		return
	fi
	log "building selftests and examples"
	make -s -C "$top/tests/selftests" KDIR="$kdir" OUT="$VAMR_BUILD/selftests" >&2
	make -s -C "$top/examples" KDIR="$kdir" OUT="$VAMR_BUILD/examples" >&2
	make -s -C "$top/tests/bench" OUT="$VAMR_BUILD/bench" >&2
	# The mirror guest's selftests (scripts/run-mirror.sh).
	make -s -C "$top/tests/mirror" KDIR="$kdir" OUT="$VAMR_BUILD/mirror" >&2
	# vamrctl: first on PATH in the test guest (scripts/guest/init).
	make -s -C "$top/tools/vamrctl" OUT="$VAMR_BUILD/tools" >&2
	# libvamr-preload.so (LD_PRELOAD: VA MRs for unmodified programs); the guests
	# use it from the build directory (VAMR_PRELOAD of scripts/guest/init).
	make -s -C "$top/tools/preload" OUT="$VAMR_BUILD/tools" >&2
	# The two-node programs (scripts/run-pair.sh): the MPI program, built with
	# Debian's Open MPI, and rdma_remote (rdma_cm).
	make -s -C "$top/tests/mpi" OUT="$VAMR_BUILD/mpi" >&2
	make -s -C "$top/tests/pair" OUT="$VAMR_BUILD/pair" >&2
}
if [ "${variant[*]}" = --distro ]; then
	# The modules were built in the chroot (distro.sh).
	user_space
	echo "$kdir"
	exit 0
fi
user_space &
user_pid=$!
# Stop the user-space build too when the modules' fails (set -e leaves here).
trap 'kill "$user_pid" 2>/dev/null || true' EXIT
# LLVM=... when KDIR was built with LLVM (the sanitizer kernel), else nothing.
read -r -a llvm <<<"$(kbuild_llvm_args "$kdir")"
log "building vamr.ko against $kdir"
make -s -C "$top" KDIR="$kdir" "${llvm[@]}" modules >&2
# The test consumer of the in-kernel API, linked against vamr.ko's exports.
make -s -C "$kdir" M="$top/tests/kapi" KBUILD_EXTRA_SYMBOLS="$top/Module.symvers" "${llvm[@]}" modules >&2
# The mirror API's test driver for QEMU's edu device (the mirror guest).
make -s -C "$kdir" M="$top/tests/mirror" KBUILD_EXTRA_SYMBOLS="$top/Module.symvers" "${llvm[@]}" modules >&2
# rdma_rxe with VA-semantics MRs: KDIR's rxe sources + patches/rxe.
"$here/build-rxe.sh" "$kdir"
# siw with VA-semantics MRs: KDIR's siw sources + patches/siw.
"$here/build-swdrv.sh" "$kdir" siw
wait "$user_pid" || die "building the user-space programs failed (see above)"
trap - EXIT
echo "$kdir"

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build rdma_rxe with VA-semantics MRs out of tree: take KDIR's own rxe
# sources, apply patches/rxe/*.patch, and build the module against KDIR,
# resolving vamr's exported symbols through vamr.ko's Module.symvers.
#
# usage: build-rxe.sh KDIR     (vamr.ko must be built first)
# Output: $VAMR_BUILD/rxe/drivers/infiniband/sw/rxe/rdma_rxe.ko, a module that
# loads in place of the stock rdma_rxe (and needs vamr.ko loaded).
#
# For another 7.3 kernel tree: build vamr.ko against it (make KDIR=...), then
# run this script with that KDIR; the patches apply to the 7.3 rxe sources.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kdir=$1
src="$kdir/drivers/infiniband/sw/rxe"
[ -f "$src/rxe.c" ] || die "$src has no rxe sources: KDIR must be a kernel source tree"
[ -f "$top/Module.symvers" ] || die "build vamr.ko first (make KDIR=$kdir)"

out="$VAMR_BUILD/rxe"
ko="$out/drivers/infiniband/sw/rxe/rdma_rxe.ko"
# Rebuild only when an input changed: the patches, the kernel tree, vamr's exports.
stamp=$( (echo "$kdir"; cat "$top"/patches/rxe/*.patch "$top/Module.symvers" \
	"$top/include/linux/vamr.h" "$top/include/uapi/misc/vamr.h") | sha256sum | cut -c1-16)
if [ -f "$ko" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
	log "patched rdma_rxe up to date: $ko"
	exit 0
fi
rm -rf "$out"
mkdir -p "$out/drivers/infiniband/sw/rxe"
cp "$src"/*.c "$src"/*.h "$src/Makefile" "$src/Kconfig" "$out/drivers/infiniband/sw/rxe/"
for p in "$top"/patches/rxe/*.patch; do
	patch -d "$out" -p1 --quiet --forward <"$p" >&2 ||
		die "patches/rxe/$(basename "$p") does not apply to $src"
done
# LLVM=... when KDIR was built with LLVM (the sanitizer kernel), else nothing.
read -r -a llvm <<<"$(kbuild_llvm_args "$kdir")"
make -s -C "$kdir" M="$out/drivers/infiniband/sw/rxe" "${llvm[@]}" \
	KBUILD_EXTRA_SYMBOLS="$top/Module.symvers" KCFLAGS="-I$top/include" modules >&2
echo "$stamp" >"$out/.stamp"
log "patched rdma_rxe: $ko"

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# dkms.conf's build: vamr.ko and the patched rdma_rxe for one kernel.
#
# usage: dkms-build.sh KERNELVER KERNEL_SOURCE_DIR   (dkms passes ${kernelver}
#        and ${kernel_source_dir}; run in dkms's copy of the tree)
#
# A KERNEL_SOURCE_DIR with the Rust build outputs (a fully built tree, such
# as the test kernel's, or a distribution's headers that ship them) is used
# as it is. Debian's headers lack them: the tree is then regenerated from
# linux-source once per kernel ABI by scripts/kbuild-rust.sh (which refuses
# a rustc or a linux-source that is not the kernel's, with the reason) and
# cached in $VAMR_KBUILD_CACHE (default /var/cache/vamr/kbuild/KERNELVER).
# Fails when modpost reports an unresolved symbol.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# = 2 ] || { echo "usage: dkms-build.sh KERNELVER KERNEL_SOURCE_DIR" >&2; exit 1; }
kver=$1 ksrc=$2
if [ -f "$ksrc/rust/libkernel.rmeta" ] && [ -f "$ksrc/scripts/target.json" ]; then
	kdir=$ksrc
else
	kdir=${VAMR_KBUILD_CACHE:-/var/cache/vamr/kbuild}/$kver
	VAMR_HEADERS=$ksrc "$here/kbuild-rust.sh" "$kver" "$kdir"
fi
# modpost only warns about an unresolved symbol; the module would not load.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make -C "$here/.." KDIR="$kdir" dkms-modules 2>&1 | tee "$log"
if grep -E 'modpost: .*undefined' "$log" >&2; then
	echo "dkms-build.sh: unresolved symbols (above): $kdir does not match the running kernel" >&2
	exit 1
fi

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The mirror guest: the test kernel on a q35 machine with QEMU's edu PCI
# device behind an emulated intel-iommu (TCG), running tests/mirror: the
# mirror API's test driver vamr_mirror_edu.ko, then its selftests mirror_edu
# and, last, the break check mirror_break (scripts/guest/mirror-init). A
# guest of its own, so that the main guest's machine stays as it is
# (Documentation/vamr.rst, "Mirror API").
#
# usage: run-mirror.sh KDIR LOGDIR
#   LOGDIR receives what run-guest.sh writes: console.log, results.log,
#   qemu.log, accel and run/.
#
# VAMR_MIRROR_IOMMU: 1 (the default when KDIR has CONFIG_INTEL_IOMMU=y):
# intel-iommu in strict mode (IOMMU_DEFAULT_DMA_STRICT), booted with
# intel_iommu=on, so that a stale IOVA raises a DMAR fault. 0 (the default
# otherwise): no IOMMU, a first check on a kernel without one: the device then
# DMAs to physical addresses, with a 40-bit DMA mask on both sides (the guest's
# memory lies beyond the edu device's own 28 bits, and a 28-bit mask would
# bounce through swiotlb), and the break check skips (a stale address would
# reach freed memory). VAMR_TIMEOUT as for run-guest.sh (default 900 s).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ $# = 2 ] || die "usage: run-mirror.sh KDIR LOGDIR"
kdir=$1 logdir=$2
progs=$VAMR_BUILD/mirror
for p in $(make -s -C "$VAMR_TOP/tests/mirror" list); do
	[ -x "$progs/$p" ] || die "no $progs/$p: build tests/mirror first (scripts/prepare.sh)"
done
[ -f "$VAMR_TOP/tests/mirror/vamr_mirror_edu.ko" ] ||
	die "no tests/mirror/vamr_mirror_edu.ko: build it first (scripts/prepare.sh)"
if [ -z "${VAMR_MIRROR_IOMMU:-}" ]; then
	VAMR_MIRROR_IOMMU=0
	grep -qx 'CONFIG_INTEL_IOMMU=y' "$kdir/.config" && VAMR_MIRROR_IOMMU=1
fi
if [ "$VAMR_MIRROR_IOMMU" = 1 ]; then
	grep -qx 'CONFIG_INTEL_IOMMU=y' "$kdir/.config" ||
		die "$kdir lacks CONFIG_INTEL_IOMMU=y (scripts/kconfig/vamr-test.config); VAMR_MIRROR_IOMMU=0 runs without"
	# The IOMMU before the devices it translates for; no interrupt remapping (TCG, 2 vCPUs).
	qemu="-machine q35 -device intel-iommu,intremap=off -device edu"
	append="intel_iommu=on vamr_mirror_iommu=1"
else
	qemu="-machine q35 -device edu,dma_mask=0xffffffffff"
	append="vamr_mirror_dma_bits=40"
fi
mkdir -p "$logdir"
log "mirror guest: ${qemu#-machine q35 } ($append)"
VAMR_GUEST_INIT=$VAMR_TOP/scripts/guest/mirror-init VAMR_GUEST_QEMU=$qemu VAMR_GUEST_MEM=1G \
	VAMR_GUEST_APPEND=$append exec "$here/run-guest.sh" "$kdir" test "$progs" "$logdir"

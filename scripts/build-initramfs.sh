#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the guest's initramfs: busybox, kmod, rdma-core user space (libibverbs,
# the rxe provider, rdma, ibv_devinfo), the kernel's modules plus vamr.ko, and
# the test programs.
#
# usage: build-initramfs.sh KDIR OUT.cpio.gz TESTDIR DEMODIR [EXTRADIR]
#   TESTDIR  executables run in test mode (/tests in the guest)
#   DEMODIR  executables run in demo mode (/demo in the guest)
#   EXTRADIR optional: its contents are copied over the image's root (test.sh
#            --sanitize adds /etc/vamr/sanitize.conf this way)
# VAMR_GUEST_TOOLS: optional host programs copied, with their libraries, to the
#            same paths in the image (bench.sh: /usr/bin/perf).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kdir=$1 out=$2
testdir=$(realpath "$3") demodir=$(realpath "$4") extradir=${5:-}
kver=$(cat "$kdir/include/config/kernel.release")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# mktemp makes the directory 0700; as the guest's "/" that would lock every
# non-root process out of the whole file system.
chmod 0755 "$stage"

mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,proc,sys,dev,tmp,run,tests,demo}

# Copy a file and every shared library it needs, keeping their paths.
copy_with_libs() {
	local f
	for f in "$@"; do
		mkdir -p "$stage$(dirname "$f")"
		cp -L "$f" "$stage$f"
		# (ldd fails on a script: nothing to add then)
		{ ldd "$f" 2>/dev/null || true; } | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' |
			while read -r lib; do
				[ -e "$stage$lib" ] && continue
				mkdir -p "$stage$(dirname "$lib")"
				cp -L "$lib" "$stage$lib"
			done
	done
}

cp /bin/busybox "$stage/bin/busybox"
for applet in $("$stage/bin/busybox" --list); do
	[ -e "$stage/bin/$applet" ] || ln -s busybox "$stage/bin/$applet"
done

copy_with_libs "$(command -v kmod)"
for tool in modprobe insmod rmmod lsmod depmod modinfo; do
	ln -sf "$(command -v kmod)" "$stage/sbin/$tool"
done

# rdma-core: libibverbs loads its providers from the directory in the
# .driver files and the provider's shared object by name.
copy_with_libs "$(command -v rdma)" "$(command -v ibv_devinfo)"
for p in ib_write_bw ib_read_bw ib_write_lat; do
	command -v "$p" >/dev/null && copy_with_libs "$(command -v "$p")"
done
mkdir -p "$stage/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$stage/etc/libibverbs.d/"
for so in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do
	copy_with_libs "$so"
done

for tool in ${VAMR_GUEST_TOOLS:-}; do
	[ -x "$tool" ] || die "VAMR_GUEST_TOOLS: $tool is not an executable"
	copy_with_libs "$tool"
done

# Kernel modules: the kernel's own (rdma_rxe and its dependencies) + vamr.ko.
mkdir -p "$stage/lib/modules"
cp -a "$kdir/.modinst/lib/modules/$kver" "$stage/lib/modules/"
rm -f "$stage/lib/modules/$kver/build" "$stage/lib/modules/$kver/source"
mkdir -p "$stage/lib/modules/$kver/extra"
cp "$top/vamr.ko" "$top/tests/kapi/vamr_api_test.ko" "$stage/lib/modules/$kver/extra/"
# The patched rdma_rxe (scripts/build-rxe.sh) goes to updates/, which modprobe
# prefers; the stock one stays in kernel/ for comparison (insmod by path).
mkdir -p "$stage/lib/modules/$kver/updates"
cp "$VAMR_BUILD/rxe/drivers/infiniband/sw/rxe/rdma_rxe.ko" "$stage/lib/modules/$kver/updates/"
depmod -b "$stage" "$kver"
grep -q '^updates/rdma_rxe.ko:.*extra/vamr.ko' "$stage/lib/modules/$kver/modules.dep" ||
	die "depmod does not resolve the patched rdma_rxe (updates/) against vamr.ko"

# Test and demo programs with their libraries.
for t in "$testdir"/* ; do
	[ -f "$t" ] && [ -x "$t" ] || continue
	copy_with_libs "$t"
	mv "$stage$t" "$stage/tests/"
done
for t in "$demodir"/* ; do
	[ -f "$t" ] && [ -x "$t" ] || continue
	copy_with_libs "$t"
	mv "$stage$t" "$stage/demo/"
done

# vamrctl (tools/vamrctl, built by prepare.sh), on PATH in the guest.
if [ -x "$VAMR_BUILD/tools/vamrctl" ]; then
	copy_with_libs "$VAMR_BUILD/tools/vamrctl"
	mv "$stage$VAMR_BUILD/tools/vamrctl" "$stage/usr/bin/vamrctl"
fi

# libvamr-preload.so (tools/preload, built by prepare.sh) where make install
# puts it, and the helpers of the shell tests (TESTDIR/helpers, else the
# selftests build's), for tests/selftests/va_mr_jobs.sh.
if [ -f "$VAMR_BUILD/tools/libvamr-preload.so" ]; then
	copy_with_libs "$VAMR_BUILD/tools/libvamr-preload.so"
	mkdir -p "$stage/usr/local/lib"
	mv "$stage$VAMR_BUILD/tools/libvamr-preload.so" "$stage/usr/local/lib/"
fi
helpers="$testdir/helpers"
[ -d "$helpers" ] || helpers="$VAMR_BUILD/selftests/helpers"
if [ -d "$helpers" ]; then
	mkdir -p "$stage/usr/libexec/vamr-tests"
	for h in "$helpers"/*; do
		[ -f "$h" ] || continue
		copy_with_libs "$(realpath "$h")"
		mv "$stage$(realpath "$h")" "$stage/usr/libexec/vamr-tests/"
	done
fi

if [ -n "$extradir" ]; then
	cp -a "$extradir/." "$stage/"
fi

cp "$here/guest/init" "$stage/init"
chmod +x "$stage/init"

(cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$out"
log "initramfs: $out ($(du -h "$out" | cut -f1))"

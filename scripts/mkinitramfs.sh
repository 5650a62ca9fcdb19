#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The initramfs of a guest whose kernel has 9p, virtio-net and overlayfs as
# modules (Debian's stock kernel; the test kernel has them built in and boots
# without one): busybox-static, those modules with their dependencies in the
# order modprobe resolves them, and scripts/guest/initramfs-init as /init,
# which loads them, mounts the host's root over virtio-9p and switches to
# the guest's real init there, as virtme-ng's initramfs does for modular
# kernels.
#
# usage: mkinitramfs.sh MODROOT KVER OUT
#   MODROOT  a module tree with depmod run (lib/modules/KVER under it: the
#            guest's staged modules, scripts/lib.sh stage_guest_modules)
#   OUT      the gzip-compressed newc cpio archive written
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ $# = 3 ] || die "usage: mkinitramfs.sh MODROOT KVER OUT"
modroot=$1 kver=$2 out=$3
busybox=/bin/busybox
[ -x "$busybox" ] || die "$busybox missing (package busybox-static)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$busybox" "$stage/bin/busybox"
for app in sh mount umount mkdir insmod switch_root cat sleep echo; do
	ln -s busybox "$stage/bin/$app"
done
cp "$here/guest/initramfs-init" "$stage/init"
chmod 0755 "$stage/init"

# One file per module, numbered in load order, decompressed here (busybox's
# insmod passes the file to init_module as it is).
n=0
: >"$stage/lib/modules/order"
for m in 9p 9pnet_virtio overlay virtio_net; do
	# "builtin NAME" lines for what the kernel has built in; "insmod PATH" else.
	modprobe -d "$modroot" -S "$kver" --show-depends "$m" 2>/dev/null |
		awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' >"$stage/paths"
while read -r path; do
	n=$((n + 1))
	name=$(printf '%02d-%s' "$n" "$(basename "${path%.xz}")")
	name=${name%.zst}
	case "$path" in
	*.xz) xz -dc "$path" >"$stage/lib/modules/$name" ;;
	*.zst) zstd -qdc "$path" >"$stage/lib/modules/$name" ;;
	*.gz) gzip -dc "$path" >"$stage/lib/modules/$name" ;;
	*) cp "$path" "$stage/lib/modules/$name" ;;
	esac
	echo "$name" >>"$stage/lib/modules/order"
done <"$stage/paths"
rm "$stage/paths"
grep -q 9pnet_virtio "$stage/lib/modules/order" ||
	die "no 9pnet_virtio module under $modroot/lib/modules/$kver"
(cd "$stage" && find . | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 | gzip -1) >"$out"

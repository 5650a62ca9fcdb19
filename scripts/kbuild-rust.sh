#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# A kernel build tree that can build Rust modules for a distribution kernel
# whose headers package lacks the Rust build outputs (Debian's: no
# rust/*.rmeta, rust/libmacros.so, scripts/target.json), regenerated from the
# same kernel's source package: run on the Debian system itself (dkms.conf's
# build, scripts/dkms-build.sh) or in a Debian chroot (scripts/distro.sh).
#
# usage: kbuild-rust.sh KVER TREE
#   KVER  the kernel release (7.3.4+deb13-amd64); its headers are
#         $VAMR_HEADERS (default /usr/src/linux-headers-KVER)
#   TREE  the tree made (or reused when its key, .vamr-kbuild, matches)
#
# The tree is linux-source-X.Y's tarball (/usr/src/linux-source-X.Y.tar.xz)
# with the headers' .config and .kernelvariables (Debian's top Makefile reads
# it: KERNELRELEASE, CROSS_COMPILE, CC=...-gcc-14), olddefconfig (which must
# not change the .config: another tool version would) and modules_prepare,
# then the headers' Module.symvers and vmlinux (modpost's exports, BTF).
# Refused, with the reason, before anything is built:
#  - when the installed rustc is not the kernel's (rustc --version against
#    CONFIG_RUSTC_VERSION_TEXT): a module built by another rustc fails to
#    load or to link (E0514; the crate hashes in Rust symbol names cover
#    rustc's full version);
#  - when linux-source-X.Y's package version is not the headers' (dpkg).
# After the build the Rust symbols the tree exports must be those of the
# headers' Module.symvers, every one of them, or the tree is removed.
# Takes 3-6 minutes on 2 cores (the Rust crates); a second run, seconds.
set -euo pipefail

log() { printf '[vamr %(%T)T] %s\n' -1 "$*" >&2; }
die() { printf '[vamr] error: %s\n' "$*" >&2; exit 1; }

[ $# = 2 ] || die "usage: kbuild-rust.sh KVER TREE"
kver=$1 tree=$2
hdr=$(realpath -e "${VAMR_HEADERS:-/usr/src/linux-headers-$kver}") ||
	die "no headers for $kver: install linux-headers-$kver"
for f in .config .kernelvariables Module.symvers; do
	[ -f "$hdr/$f" ] || die "no $hdr/$f: install linux-headers-$kver"
done
grep -qx 'CONFIG_RUST=y' "$hdr/.config" || die "$kver is not built with CONFIG_RUST=y"
series=$(echo "$kver" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
tarball=/usr/src/linux-source-$series.tar.xz
[ -f "$tarball" ] || die "no $tarball: install linux-source-$series (the same version as linux-headers-$kver)"

# The toolchain: exactly the kernel's rustc.
want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"/\1/p' "$hdr/.config")
have=$(rustc --version 2>/dev/null) || die "no rustc on PATH: install Debian's rustc ($want)"
[ "$have" = "$want" ] ||
	die "rustc is '$have', but $kver was built by '$want': install that rustc (Debian: the rustc package of the kernel's release) and put it first on PATH"
command -v bindgen >/dev/null || die "no bindgen on PATH (Debian: package bindgen)"

# The sources: linux-source of the headers' version.
hpkg=$(dpkg-query -S "$hdr/.config" 2>/dev/null | sed -n '1s/: .*//p') || true
[ -n "$hpkg" ] || die "$hdr/.config belongs to no installed package (dpkg -S)"
hver=$(dpkg-query -W -f='${Version}' "$hpkg")
sver=$(dpkg-query -W -f='${Version}' "linux-source-$series" 2>/dev/null) || die "linux-source-$series is not installed"
[ "$hver" = "$sver" ] ||
	die "linux-source-$series is $sver but $hpkg is $hver: install linux-source-$series=$hver"

key=$( {
	echo "$kver $hver"
	echo "$have"
	bindgen --version
	dpkg-query -W -f='${Package} ${Version}\n' rust-src gcc-14 binutils pahole 2>/dev/null || true
	sha256sum <"$hdr/.config"
	sha256sum <"$hdr/.kernelvariables"
} | sha256sum | cut -c1-16)
if [ "$(cat "$tree/.vamr-kbuild" 2>/dev/null)" = "$key" ]; then
	log "kernel tree for $kver: $tree (ready)"
	exit 0
fi

log "kernel tree for $kver: unpacking linux-source-$series $sver into $tree"
rm -rf "$tree" "$tree.new"
mkdir -p "$tree.new"
tar -xf "$tarball" -C "$tree.new" --strip-components=1
cp "$hdr/.config" "$hdr/.kernelvariables" "$tree.new/"
make -s -C "$tree.new" olddefconfig >&2
diff <(grep '^CONFIG_\|^# CONFIG_' "$hdr/.config") <(grep '^CONFIG_\|^# CONFIG_' "$tree.new/.config") >&2 ||
	die "olddefconfig changed $kver's .config (the diff above): a tool (gcc, openssl, pahole ...) differs from the kernel's"
log "make modules_prepare (the Rust crates: a few minutes)"
make -s -C "$tree.new" -j"$(nproc)" modules_prepare >&2
[ "$(cat "$tree.new/include/config/kernel.release")" = "$kver" ] ||
	die "the tree has kernel release $(cat "$tree.new/include/config/kernel.release"), not $kver"
for f in rust/libkernel.rmeta rust/libmacros.so scripts/target.json; do
	[ -e "$tree.new/$f" ] || die "modules_prepare left no $f"
done

# The Rust symbols of the tree against the headers' Module.symvers.
ours=$(sed -n 's/^EXPORT_SYMBOL_RUST_GPL(\(_R[^)]*\));$/\1/p' "$tree.new"/rust/exports_*_generated.h | sort -u)
theirs=$(awk '$2 ~ /^_R/ { print $2 }' "$hdr/Module.symvers" | sort -u)
m=$(printf '%s\n' "$theirs" | grep -c . || true)
n=$(comm -12 <(printf '%s\n' "$ours") <(printf '%s\n' "$theirs") | grep -c . || true)
extra=$(comm -23 <(printf '%s\n' "$ours") <(printf '%s\n' "$theirs") | grep -c . || true)
log "Rust symbols: $n of $m of $kver's Module.symvers match ($extra of the tree's not in it)"
if [ "$m" = 0 ] || [ "$n" != "$m" ] || [ "$extra" != 0 ]; then
	rm -rf "$tree.new"
	die "the regenerated Rust symbols differ from $kver's: another rustc, bindgen or source than the kernel's"
fi
echo "$n of $m" >"$tree.new/.vamr-rust-symbols"
cp "$hdr/Module.symvers" "$tree.new/"
[ ! -f "$hdr/vmlinux" ] || cp "$hdr/vmlinux" "$tree.new/"
echo "$key" >"$tree.new/.vamr-kbuild"
mv "$tree.new" "$tree"
log "kernel tree for $kver: $tree"

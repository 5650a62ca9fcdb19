#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# vamr on Debian's stock kernel (issue 32, step 1): everything needed to
# build vamr.ko and the patched rdma_rxe for Debian's own, unmodified
# linux-image-7.3.4+deb13-amd64 (trixie-backports), without compiling a kernel.
#
# usage: distro.sh
#
#  a) a Debian trixie chroot (mmdebstrap, from the mirror of this machine's
#     apt sources) with Debian's rustc, rust-src, bindgen, libclang, gcc-14,
#     ..., linux-source-7.3 and linux-headers-$KVER of one version;
#  b) Debian's stock kernel image and modules packages, unpacked: vmlinuz and
#     lib/modules/$KVER (depmod run);
#  c) a kernel tree with the Rust build outputs Debian's headers lack
#     (rust/*.rmeta, ...): linux-source unpacked, the headers' .config, make
#     with the headers' .kernelvariables (KERNELRELEASE, CC=...-gcc-14, ...),
#     olddefconfig, modules_prepare and rust/; the Rust symbols it defines
#     must be those of Debian's Module.symvers (which the tree then gets);
#  d) vamr.ko and the patched rdma_rxe built against that tree in the chroot,
#     from a copy of this work tree; vermagic and modpost checked.
#
# Everything is cached in $VAMR_CACHE/distro (markers per step, keyed by
# their inputs): a second run takes seconds. Its work/ directory is
# bind-mounted at the same path in the chroot, so paths agree inside and out.
# Prints the paths at the end (KEY=path lines on stdout).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

# Debian's kernel ABI: its headers' package name and the modules' release.
KVER=${VAMR_DISTRO_KVER:-7.3.4+deb13-amd64}
# The rustc Debian built that kernel with (its CONFIG_RUSTC_VERSION_TEXT).
RUSTC_DEB=${VAMR_DISTRO_RUSTC:-1.85.1+dfsg1-1+deb13u1}
SUITE=trixie

base=$VAMR_CACHE/distro
root=$base/root
work=$base/work
# The work tree's copy in work/ (built there, not in the work tree).
srccopy=$work/vamr

[ "$(id -u)" = 0 ] || die "distro.sh must run as root (mmdebstrap, chroot)"
mkdir -p "$work"

# in_chroot CMD...: CMD in the chroot, in a private mount namespace (the
# mounts go with it), with proc, sys, dev and work/ mounted.
in_chroot() {
	cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
	unshare --mount --propagation private -- /bin/bash -euc '
		r=$1 w=$2
		shift 2
		mount -t proc proc "$r/proc"
		mount -t sysfs sys "$r/sys"
		mount --rbind /dev "$r/dev"
		mkdir -p "$r$w"
		mount --bind "$w" "$r$w"
		exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
	' in_chroot "$root" "$work" "$@"
}

# The apt options of this machine that the chroot's apt needs too (no date
# checks where the host has none: mirrors served as snapshots).
apt_opts() {
	local v
	for v in Acquire::Check-Valid-Until Acquire::Check-Date; do
		if [ "$(apt-config dump "$v" | sed -n "s/^$v \"\(.*\)\";/\1/p")" = false ]; then
			echo "--aptopt=$v \"false\";"
		fi
	done
}

# --- a) the trixie chroot -----------------------------------------------
TOOLS=(rustc rust-src bindgen libclang-19-dev gcc-14 binutils pahole openssl libssl-dev
	make bc flex bison libelf-dev dkms kmod patch cpio xz-utils zstd python3 perl)

make_chroot() {
	local uri securi key opts=()
	uri=$(mirror_uri)
	securi=$(mirror_uri security)
	key=$(printf '%s\n' "$SUITE" "$KVER" "${TOOLS[@]}" | sha256sum | cut -c1-16)
	if [ "$(cat "$base/.chroot" 2>/dev/null)" = "$key" ]; then
		return 0
	fi
	command -v mmdebstrap >/dev/null || {
		log "apt-get install mmdebstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2
	}
	if [ "$(cat "$base/.chroot-base" 2>/dev/null)" != "$key" ]; then
		rm -rf "$root" "$base/.chroot"
		mapfile -t opts < <(apt_opts)
		log "mmdebstrap $SUITE (toolchain) into $root"
		mmdebstrap --mode=root --variant=apt --format=directory "${opts[@]}" \
			--include="$(IFS=,; echo "${TOOLS[*]}")" "$SUITE" "$root" \
			"deb $uri $SUITE main" "deb $uri $SUITE-updates main" \
			"deb $securi $SUITE-security main" "deb $uri $SUITE-backports main" >&2
		echo "$key" >"$base/.chroot-base"
	fi
	# mmdebstrap leaves no package lists behind.
	in_chroot apt-get update -qq >&2
	# linux-source and the headers of one version, from whichever suite has
	# it (trixie-backports for 7.3).
	local ver
	ver=$(in_chroot apt-cache madison "linux-headers-$KVER" | awk -F'|' '{ gsub(/ /, "", $2); print $2; exit }')
	[ -n "$ver" ] || die "no linux-headers-$KVER in $SUITE, $SUITE-updates or $SUITE-backports"
	in_chroot apt-cache madison linux-source-7.3 | grep -q "| $ver |" ||
		die "no linux-source-7.3 $ver (of linux-headers-$KVER) in the chroot's apt sources"
	log "linux-source-7.3 and linux-headers-$KVER $ver: $(in_chroot apt-cache madison "linux-headers-$KVER" |
		awk -F'|' '{ gsub(/^ +| +$/, "", $3); print $3; exit }')"
	in_chroot apt-get install -y -qq --no-install-recommends \
		"linux-source-7.3=$ver" "linux-headers-$KVER=$ver" >&2
	echo "$ver" >"$base/pkgver"
	echo "$key" >"$base/.chroot"
}

check_rustc() {
	local have want
	have=$(in_chroot dpkg-query -W -f='${Version}' rustc)
	[ "$have" = "$RUSTC_DEB" ] ||
		log "warning: the chroot's rustc is $have, not $RUSTC_DEB (checking its version text)"
	have=$(in_chroot rustc --version)
	want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"/\1/p' "$root/usr/src/linux-headers-$KVER/.config")
	[ "$have" = "$want" ] ||
		die "the chroot's rustc is '$have', Debian's $KVER was built by '$want'"
	log "rustc: $have (package $(in_chroot dpkg-query -W -f='${Version}' rustc))"
}

t0=$SECONDS
make_chroot
check_rustc
log "a) chroot ready ($((SECONDS - t0)) s)"

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
#  c) d) dkms add, build and install of a copy of this work tree in the
#     chroot, as a user runs them (Documentation/install-debian.rst): the
#     build regenerates the Rust build outputs Debian's headers lack from
#     linux-source (scripts/kbuild-rust.sh, via dkms.conf's
#     scripts/dkms-build.sh) into work/kbuild/$KVER, then builds vamr.ko and
#     the patched rdma_rxe; dkms status, vermagic and modpost checked.
#
# Everything is cached in $VAMR_CACHE/distro (markers per step, keyed by
# their inputs): a second run takes seconds. Its work/ directory is
# bind-mounted at the same path in the chroot, so paths agree inside and out.
# Prints the tree (the guests' KDIR, with .vamr-stock naming the image, the
# module tree and the two modules: scripts/lib.sh) on stdout.
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
# (rustfmt: bindgen formats the bindings it writes with it.)
TOOLS=(rustc rust-src rustfmt bindgen libclang-19-dev gcc-14 binutils pahole openssl libssl-dev
	make bc flex bison libelf-dev dkms kmod patch cpio xz-utils zstd python3 perl)

make_chroot() {
	local uri securi key basekey opts=()
	uri=$(mirror_uri)
	securi=$(mirror_uri security)
	# The chroot is made again only for another suite or mirror; another
	# package list is installed into the one there.
	basekey=$(printf '%s\n' "$SUITE" "$uri" "$securi" | sha256sum | cut -c1-16)
	key=$(printf '%s\n' "$basekey" "$KVER" "${TOOLS[@]}" | sha256sum | cut -c1-16)
	if [ "$(cat "$base/.chroot" 2>/dev/null)" = "$key" ]; then
		return 0
	fi
	command -v mmdebstrap >/dev/null || {
		log "apt-get install mmdebstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2
	}
	if [ "$(cat "$base/.chroot-base" 2>/dev/null)" != "$basekey" ]; then
		rm -rf "$root" "$base/.chroot"
		mapfile -t opts < <(apt_opts)
		log "mmdebstrap $SUITE (toolchain) into $root"
		mmdebstrap --mode=root --variant=apt --format=directory "${opts[@]}" \
			--include="$(IFS=,; echo "${TOOLS[*]}")" "$SUITE" "$root" \
			"deb $uri $SUITE main" "deb $uri $SUITE-updates main" \
			"deb $securi $SUITE-security main" "deb $uri $SUITE-backports main" >&2
		echo "$basekey" >"$base/.chroot-base"
	fi
	# mmdebstrap leaves no package lists behind.
	in_chroot apt-get update -qq >&2
	in_chroot apt-get install -y -qq --no-install-recommends "${TOOLS[@]}" >&2
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

# --- b) Debian's stock kernel: vmlinuz and its modules ------------------
stock=$work/stock
# The packages of the image as linux-image-$KVER depends on them.
IMAGE_PKGS=("linux-binary-$KVER" "linux-modules-$KVER" "linux-base-$KVER")

fetch_stock() {
	local ver=$1 p deb
	if [ "$(cat "$stock/.done" 2>/dev/null)" = "$ver" ]; then
		return 0
	fi
	rm -rf "$stock" "$work/debs"
	mkdir -p "$stock" "$work/debs"
	log "apt-get download ${IMAGE_PKGS[*]} ($ver)"
	in_chroot sh -c 'cd "$1" && shift && apt-get download -q "$@"' sh "$work/debs" \
		"${IMAGE_PKGS[@]/%/=$ver}" >&2 ||
		die "apt-get download of Debian's $KVER image packages failed"
	for p in "${IMAGE_PKGS[@]}"; do
		deb=$(ls "$work/debs/${p}_"*.deb 2>/dev/null | head -n1)
		[ -n "$deb" ] || die "apt-get download left no $p package in $work/debs"
		dpkg-deb -x "$deb" "$stock"
	done
	# Debian installs the modules under /lib or (merged /usr) /usr/lib.
	if [ ! -d "$stock/lib/modules/$KVER" ] && [ -d "$stock/usr/lib/modules/$KVER" ]; then
		mkdir -p "$stock/lib/modules"
		mv "$stock/usr/lib/modules/$KVER" "$stock/lib/modules/"
	fi
	rmdir "$stock/usr/lib/modules" 2>/dev/null || true
	# The image: in the modules directory (Debian 7.x), or in /boot.
	if [ ! -e "$stock/boot/vmlinuz-$KVER" ] && [ -f "$stock/lib/modules/$KVER/vmlinuz" ]; then
		mkdir -p "$stock/boot"
		ln -s "../lib/modules/$KVER/vmlinuz" "$stock/boot/vmlinuz-$KVER"
	fi
	[ -f "$stock/boot/vmlinuz-$KVER" ] || die "no vmlinuz in ${IMAGE_PKGS[0]}"
	[ -d "$stock/lib/modules/$KVER/kernel" ] || die "no lib/modules/$KVER/kernel in ${IMAGE_PKGS[1]}"
	# What the postinst of linux-image does: modules.dep and friends.
	in_chroot depmod -b "$stock" "$KVER"
	echo "$ver" >"$stock/.done"
}

# --- c) and d) vamr through DKMS, as on a Debian machine --------------------
# The chroot is a Debian trixie system with the backports kernel's headers
# and linux-source: dkms add/build/install of a copy of this work tree, for
# $KVER, run there exactly as Documentation/install-debian.rst says. dkms.conf's
# build (scripts/dkms-build.sh) regenerates the Rust build outputs once
# (scripts/kbuild-rust.sh: the rustc and linux-source checks, olddefconfig
# unchanged, modules_prepare, the Rust symbols against Debian's
# Module.symvers), into work/kbuild/$KVER, which is the KDIR of the guests.

# A copy of the work tree (its tracked and untracked, not ignored, files).
copy_worktree() {
	rm -rf "$srccopy"
	mkdir -p "$srccopy"
	(cd "$VAMR_TOP" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf -) | tar -xf - -C "$srccopy"
}

# The sources' key: every file copy_worktree copies, with its contents.
sources_key() {
	(cd "$VAMR_TOP" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
		xargs -0 sha256sum) | sha256sum | cut -c1-16
}

dkms_modules() {
	local ver blog=$work/dkms.log key vm want="$KVER SMP preempt mod_unload" ko
	ver=$(cat "$VAMR_TOP/VERSION")
	key="$(sources_key) $(cat "$base/.chroot")"
	installed=$root/lib/modules/$KVER/updates/dkms
	if [ "$(cat "$work/.dkms" 2>/dev/null)" = "$key" ] && [ -f "$tree/.vamr-kbuild" ]; then
		return 0
	fi
	copy_worktree
	log "dkms add, build, install vamr/$ver for $KVER (in the chroot; log: $blog)"
	in_chroot sh -c '
		set -e
		dkms remove "vamr/$2" --all >/dev/null 2>&1 || true
		rm -rf "/usr/src/vamr-$2"
		dkms add "$1"
		env VAMR_KBUILD_CACHE="$4" dkms build "vamr/$2" -k "$3"
		dkms install "vamr/$2" -k "$3"
		dkms status vamr
		for m in vamr rdma_rxe; do
			printf "modinfo %s: " "$m"
			modinfo -F version /lib/modules/"$3"/updates/dkms/"$m".ko*
		done
	' sh "$srccopy" "$ver" "$KVER" "$work/kbuild" >"$blog" 2>&1 || {
		tail -n 40 "$blog" >&2
		cat "$root/var/lib/dkms/vamr/$ver/build/make.log" 2>/dev/null | tail -n 30 >&2 || true
		die "dkms add/build/install of vamr/$ver for $KVER failed (log: $blog)"
	}
	grep -q "^vamr/$ver, $KVER, x86_64: installed" "$blog" ||
		die "dkms status does not show vamr/$ver installed for $KVER (log: $blog)"
	for ko in "$installed"/vamr.ko* "$installed"/rdma_rxe.ko*; do
		[ -f "$ko" ] || die "dkms installed no $(basename "$ko") in $installed"
		vm=$(modinfo -F vermagic "$ko" | sed 's/ *$//')
		[ "$vm" = "$want" ] || die "$ko has vermagic '$vm', not '$want'"
	done
	log "dkms: $(grep "^vamr/$ver" "$blog"); vermagic $want; modpost: no unresolved symbol (dkms-build.sh)"
	echo "$key" >"$work/.dkms"
}

t0=$SECONDS
make_chroot
check_rustc
log "a) chroot ready ($((SECONDS - t0)) s)"
pkgver=$(cat "$base/pkgver")
tree=$work/kbuild/$KVER

t=$SECONDS
fetch_stock "$pkgver"
log "b) stock kernel $KVER ($pkgver) unpacked ($((SECONDS - t)) s)"

t=$SECONDS
dkms_modules
log "c, d) DKMS build, Rust symbols $(cat "$tree/.vamr-rust-symbols") ($((SECONDS - t)) s); total $((SECONDS - t0)) s"

# The guests' kernel (scripts/lib.sh: .vamr-stock of a stock kernel's tree).
{
	echo "image=$stock/boot/vmlinuz-$KVER"
	echo "modules=$stock/lib/modules/$KVER"
	echo "vamr=$(ls "$installed"/vamr.ko* | head -n1)"
	echo "rxe=$(ls "$installed"/rdma_rxe.ko* | head -n1)"
} >"$tree/.vamr-stock"
echo "$tree"

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
#     olddefconfig, modules_prepare (which builds rust/ too); the Rust symbols
#     it exports must be those of Debian's Module.symvers (which the tree
#     then gets, with the headers' vmlinux for the modules' BTF);
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

# --- c) the kernel tree with the Rust build outputs -----------------------
hdr=/usr/src/linux-headers-$KVER

# The tree's key: the source version and the toolchain that builds rust/.
tree_key() {
	local ver=$1
	{
		echo "$ver"
		in_chroot dpkg-query -W -f='${Package} ${Version}\n' rustc rust-src bindgen \
			libclang-19-dev gcc-14 binutils pahole
		sha256sum <"$root$hdr/.config"
		sha256sum <"$root$hdr/.kernelvariables"
	} | sha256sum | cut -c1-16
}

prepare_tree() {
	local ver=$1 tree=$2 key
	key=$(tree_key "$ver")
	if [ "$(cat "$tree/.vamr-distro" 2>/dev/null)" = "$key" ]; then
		return 0
	fi
	rm -rf "$tree" "$work/linux-source-7.3"
	log "unpack linux-source-7.3 $ver into $tree"
	tar -xf "$root/usr/src/linux-source-7.3.tar.xz" -C "$work"
	mv "$work/linux-source-7.3" "$tree"
	# Debian's top Makefile includes .kernelvariables (KERNELRELEASE,
	# CROSS_COMPILE, CC=...-gcc-14): every make in the tree, M= too, uses it.
	cp "$root$hdr/.config" "$root$hdr/.kernelvariables" "$tree/"
	log "make olddefconfig modules_prepare (rust/ with Debian's rustc)"
	in_chroot make -s -C "$tree" olddefconfig >&2
	diff <(grep '^CONFIG_\|^# CONFIG_' "$root$hdr/.config") <(grep '^CONFIG_\|^# CONFIG_' "$tree/.config") >&2 ||
		die "olddefconfig changed Debian's $KVER .config (the diff above): a tool differs"
	in_chroot make -s -C "$tree" -j"$(nproc)" modules_prepare >&2
	[ "$(cat "$tree/include/config/kernel.release")" = "$KVER" ] ||
		die "$tree has kernel release $(cat "$tree/include/config/kernel.release"), not $KVER"
	local f
	for f in rust/libkernel.rmeta rust/libcore.rmeta rust/libmacros.so scripts/target.json; do
		[ -e "$tree/$f" ] || die "modules_prepare left no $f in $tree"
	done
	check_rust_symbols "$tree"
	# What modpost resolves against (the exports of vmlinux and Debian's
	# modules) and what gives modules BTF against Debian's vmlinux.
	cp "$root$hdr/Module.symvers" "$root$hdr/vmlinux" "$tree/"
	echo "$key" >"$tree/.vamr-distro"
}

# check_rust_symbols TREE: the Rust symbols TREE's rust/ exports are the ones
# of Debian's Module.symvers, all of them: the crate hashes in the mangled
# names cover rustc's full version and every crate's inputs, so they agree
# only when the toolchain and the sources are Debian's.
check_rust_symbols() {
	local tree=$1 ours theirs n m extra
	ours=$(mktemp) theirs=$(mktemp)
	sed -n 's/^EXPORT_SYMBOL_RUST_GPL(\(_R[^)]*\));$/\1/p' "$tree"/rust/exports_*_generated.h | sort -u >"$ours"
	awk '$2 ~ /^_R/ { print $2 }' "$root$hdr/Module.symvers" | sort -u >"$theirs"
	m=$(wc -l <"$theirs")
	n=$(comm -12 "$ours" "$theirs" | wc -l)
	extra=$(comm -23 "$ours" "$theirs" | wc -l)
	rm -f "$ours" "$theirs"
	log "Rust symbols: $n of $m of Debian's Module.symvers match ($extra of ours not in it)"
	[ "$m" -gt 0 ] && [ "$n" = "$m" ] && [ "$extra" = 0 ] ||
		die "the Rust symbols of $tree differ from Debian's $KVER: another rustc or source"
	echo "$n of $m" >"$tree/.vamr-rust-symbols"
}

# --- d) vamr.ko and the patched rdma_rxe against the tree -----------------
# A copy of the work tree (its tracked and untracked, not ignored, files):
# built in the chroot, it leaves the work tree's own outputs alone.
copy_worktree() {
	mkdir -p "$srccopy"
	(cd "$VAMR_TOP" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf -) | tar -xf - -C "$srccopy"
}

build_modules() {
	local tree=$1 blog=$work/modules.log vm want="$KVER SMP preempt mod_unload"
	copy_worktree
	log "make KDIR=$tree modules; scripts/build-rxe.sh $tree (in the chroot)"
	in_chroot sh -c "make -C '$srccopy' KDIR='$tree' modules &&
		VAMR_BUILD='$srccopy/build' '$srccopy/scripts/build-rxe.sh' '$tree'" >"$blog" 2>&1 || {
		tail -n 30 "$blog" >&2
		die "the module build against $tree failed (log: $blog)"
	}
	! grep -E 'modpost: .*undefined|WARNING: modpost' "$blog" >&2 ||
		die "modpost found unresolved symbols (log: $blog)"
	for ko in "$vamr_ko" "$rxe_ko"; do
		vm=$(modinfo -F vermagic "$ko" | sed 's/ *$//')
		[ "$vm" = "$want" ] || die "$ko has vermagic '$vm', not '$want'"
	done
	log "vermagic $want; modpost: no unresolved symbol"
}

t0=$SECONDS
make_chroot
check_rustc
log "a) chroot ready ($((SECONDS - t0)) s)"
pkgver=$(cat "$base/pkgver")
tree=$work/linux-${pkgver//[:~+]/_}

t=$SECONDS
fetch_stock "$pkgver"
log "b) stock kernel $KVER ($pkgver) unpacked ($((SECONDS - t)) s)"

t=$SECONDS
prepare_tree "$pkgver" "$tree"
log "c) tree with Rust outputs, symbols $(cat "$tree/.vamr-rust-symbols") ($((SECONDS - t)) s)"

t=$SECONDS
vamr_ko=$srccopy/vamr.ko
rxe_ko=$srccopy/build/rxe/drivers/infiniband/sw/rxe/rdma_rxe.ko
build_modules "$tree"
log "d) modules built ($((SECONDS - t)) s); total $((SECONDS - t0)) s"

cat <<EOT
KDIR=$tree
VMLINUZ=$stock/boot/vmlinuz-$KVER
MODULES=$stock/lib/modules/$KVER
VAMR_KO=$vamr_ko
RXE_KO=$rxe_ko
EOT

#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the vamr test kernel (allnoconfig + scripts/kconfig/vamr-test.config)
# from the Debian linux-source-7.3 package fetched by setup-host.sh.
#
# The build is cached outside the work tree, in
#   $VAMR_CACHE/kernel/<source version>-<fragment hash>-<rustc version>/
# so a second run with the same inputs takes seconds. Prints the build
# directory (usable as KDIR) on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

frag="$here/kconfig/vamr-test.config"
verfile="$VAMR_CACHE/src/kernel-version"
[ -f "$verfile" ] || die "no kernel source fetched yet: run scripts/setup-host.sh first"
srcver=$(cat "$verfile")
deb="$VAMR_CACHE/src/linux-source-7.3_${srcver}_all.deb"
[ -f "$deb" ] || die "missing $deb: run scripts/setup-host.sh"

rustc_ver=$(rustc --version | awk '{ print $2 }')
# The key covers what determines the kernel: source version, config fragment, rustc.
frag_hash=$(sha256sum <"$frag" | cut -c1-12)
key="${srcver//[:~+]/_}-${frag_hash}-rustc${rustc_ver}"
kdir="$VAMR_CACHE/kernel/$key"

if [ -f "$kdir/.vamr-built" ]; then
	log "kernel cache hit: $kdir"
	echo "$kdir"
	exit 0
fi

klog="$VAMR_CACHE/kernel/$key.log"
log "building test kernel $srcver (key $key); 7-17 min on 2 cores; log: $klog"
rm -rf "$kdir"
mkdir -p "$kdir"
# The build's own output goes to the log; on failure its tail is shown.
exec 3>&2 2>"$klog"
trap 'rc=$?; if [ $rc != 0 ]; then tail -n 40 "$klog" >&3; fi' EXIT
tmp="$kdir/.unpack"
mkdir -p "$tmp"
dpkg -x "$deb" "$tmp"
tarball=$(ls "$tmp"/usr/src/linux-source-7.3*.tar.* | head -n1)
tar -xf "$tarball" -C "$kdir" --strip-components=1
rm -rf "$tmp"

cd "$kdir"
make -s rustavailable >&2 || die "make rustavailable failed: rustc/bindgen/libclang not usable"
make -s allnoconfig >&2
scripts/kconfig/merge_config.sh -m .config "$frag" >&2
make -s olddefconfig >&2

# Every fragment option must have survived olddefconfig.
missing=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=y | CONFIG_*=m)
		if ! grep -qx "$line" .config; then
			log "config option not set as requested: $line"
			missing=1
		fi
		;;
	esac
done <"$frag"
[ "$missing" = 0 ] || die "the config fragment does not apply cleanly to $srcver"

make -j"$(nproc)" bzImage modules >&2 || die "kernel build failed"
make -s INSTALL_MOD_PATH="$kdir/.modinst" modules_install >&2
rustc --version >"$kdir/.vamr-rustc"
echo "$srcver" >"$kdir/.vamr-source-version"
touch "$kdir/.vamr-built"
exec 2>&3
log "kernel built: $kdir"
echo "$kdir"

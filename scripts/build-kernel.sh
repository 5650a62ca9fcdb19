#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the vamr test kernel (allnoconfig + scripts/kconfig/vamr-test.config)
# from the Debian linux-source-7.3 package fetched by setup-host.sh.
#
# usage: build-kernel.sh [--sanitize | --bench]
#   --bench     the benchmark kernel instead: vamr-test.config plus
#               scripts/kconfig/vamr-bench.config (no lockdep, DEBUG_VM,
#               KUnit; Rust helpers inlined), built with LLVM=-<rustc's LLVM
#               major version> (setup-host.sh --bench installs that
#               toolchain). Used by scripts/bench.sh.
#   --sanitize  the sanitizer kernel instead: vamr-test.config plus
#               scripts/kconfig/vamr-sanitize.config (KASAN, UBSAN, kmemleak,
#               fault injection), built with LLVM=$VAMR_LLVM (setup-host.sh
#               --sanitize installs that toolchain). Used by test.sh --sanitize.
#
# The build is cached outside the work tree, in
#   $VAMR_CACHE/kernel/<source version>-<fragment hash>-<rustc version>/
#   $VAMR_CACHE/kernel/<source version>-<fragment hash>-bench<bench fragment
#                      hash>-rustc<version>-clang<version>/     (--bench)
#   $VAMR_CACHE/kernel/<source version>-<fragment hash>-san<sanitize fragment
#                      hash>-rustc<version>-clang<version>/     (--sanitize)
# so a second run with the same inputs takes seconds. Prints the build
# directory (usable as KDIR) on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

sanitize=0
bench=0
for arg in "$@"; do
	case "$arg" in
	--sanitize) sanitize=1 ;;
	--bench) bench=1 ;;
	*) die "usage: build-kernel.sh [--sanitize | --bench]" ;;
	esac
done

frag="$here/kconfig/vamr-test.config"
sanfrag="$here/kconfig/vamr-sanitize.config"
benchfrag="$here/kconfig/vamr-bench.config"
[ "$sanitize$bench" != 11 ] || die "--sanitize and --bench exclude each other"
verfile="$VAMR_CACHE/src/kernel-version"
[ -f "$verfile" ] || die "no kernel source fetched yet: run scripts/setup-host.sh first"
srcver=$(cat "$verfile")
deb="$VAMR_CACHE/src/linux-source-7.3_${srcver}_all.deb"
[ -f "$deb" ] || die "missing $deb: run scripts/setup-host.sh"

rustc_ver=$(rustc --version | awk '{ print $2 }')
# The key covers what determines the kernel: source version, config fragment, rustc.
frag_hash=$(sha256sum <"$frag" | cut -c1-12)
key="${srcver//[:~+]/_}-${frag_hash}-rustc${rustc_ver}"
# make arguments of every kernel make call: none for the test kernel.
kmake=()
frags=("$frag")
if [ "$sanitize" = 1 ]; then
	command -v "clang$VAMR_LLVM" >/dev/null && command -v "ld.lld$VAMR_LLVM" >/dev/null ||
		die "clang$VAMR_LLVM/ld.lld$VAMR_LLVM missing: run scripts/setup-host.sh --sanitize"
	clang_ver=$("clang$VAMR_LLVM" --version | sed -n '1s/.*clang version \([0-9.]*\).*/\1/p')
	[ -n "$clang_ver" ] || die "cannot read the version of clang$VAMR_LLVM"
	# ... plus the sanitizer fragment and the C toolchain.
	san_hash=$(sha256sum <"$sanfrag" | cut -c1-12)
	key="${srcver//[:~+]/_}-${frag_hash}-san${san_hash}-rustc${rustc_ver}-clang${clang_ver}"
	kmake=("LLVM=$VAMR_LLVM")
	frags+=("$sanfrag")
fi
if [ "$bench" = 1 ]; then
	# ... plus the benchmark fragment, which turns the debug options off and
	# inlines the C helpers into Rust: built with the clang of rustc's LLVM.
	m=$(rustc_llvm_major)
	command -v "clang-$m" >/dev/null && command -v "ld.lld-$m" >/dev/null ||
		die "clang-$m/ld.lld-$m (rustc's LLVM) missing: run scripts/setup-host.sh --bench"
	clang_ver=$("clang-$m" --version | sed -n '1s/.*clang version \([0-9.]*\).*/\1/p')
	[ -n "$clang_ver" ] || die "cannot read the version of clang-$m"
	bench_hash=$(sha256sum <"$benchfrag" | cut -c1-12)
	key="${srcver//[:~+]/_}-${frag_hash}-bench${bench_hash}-rustc${rustc_ver}-clang${clang_ver}"
	kmake=("LLVM=-$m")
	# bindgen's libclang from the same LLVM as the compiler.
	export LIBCLANG_PATH="/usr/lib/llvm-$m/lib"
	frags+=("$benchfrag")
fi
kdir="$VAMR_CACHE/kernel/$key"

if [ -f "$kdir/.vamr-built" ]; then
	log "kernel cache hit: $kdir"
	echo "$kdir"
	exit 0
fi

klog="$VAMR_CACHE/kernel/$key.log"
if [ "$bench" = 1 ]; then
	log "building the benchmark kernel $srcver (key $key); 7-17 min on 2 cores; log: $klog"
elif [ "$sanitize" = 1 ]; then
	log "building the sanitizer kernel $srcver (key $key); 20-40 min on 2 cores; log: $klog"
else
	log "building test kernel $srcver (key $key); 7-17 min on 2 cores; log: $klog"
fi
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
make -s "${kmake[@]}" rustavailable >&2 || die "make rustavailable failed: rustc/bindgen/libclang not usable"
make -s "${kmake[@]}" allnoconfig >&2
scripts/kconfig/merge_config.sh -m .config "${frags[@]}" >&2
make -s "${kmake[@]}" olddefconfig >&2

# Every fragment option must have survived olddefconfig: "=y" and "=m" lines
# of the test fragment; in the sanitizer fragment also values ("=40000") and
# "is not set" lines.
missing=0
check_fragment() { # fragment strict
	local line opt
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=y | CONFIG_*=m)
			if ! grep -qx "$line" .config; then
				log "config option not set as requested: $line"
				missing=1
			fi
			;;
		CONFIG_*=n)
			if [ "$2" = 1 ] && grep -q "^${line%=n}=" .config; then
				log "config option not off as requested: $(grep "^${line%=n}=" .config)"
				missing=1
			fi
			;;
		CONFIG_*=*)
			if [ "$2" = 1 ] && ! grep -qxF "$line" .config; then
				log "config option not set as requested: $line (have: $(grep "^${line%%=*}=" .config || echo unset))"
				missing=1
			fi
			;;
		"# CONFIG_"*" is not set")
			opt=${line#\# }
			opt=${opt%% *}
			if [ "$2" = 1 ] && grep -q "^$opt=" .config; then
				log "config option not off as requested: $(grep "^$opt=" .config)"
				missing=1
			fi
			;;
		esac
	done <"$1"
}
if [ "$bench" = 1 ]; then
	# The bench fragment overrides debug lines of the test fragment.
	grep -v -e PROVE_LOCKING -e DEBUG_VM -e DEBUG_ATOMIC_SLEEP -e KUNIT "$frag" >"$kdir/.frag-test"
	check_fragment "$kdir/.frag-test" 0
	check_fragment "$benchfrag" 1
else
	check_fragment "$frag" 0
fi
if [ "$sanitize" = 1 ]; then
	check_fragment "$sanfrag" 1
fi
[ "$missing" = 0 ] || die "the config fragment does not apply cleanly to $srcver"

make -j"$(nproc)" "${kmake[@]}" bzImage modules >&2 || die "kernel build failed"
make -s "${kmake[@]}" INSTALL_MOD_PATH="$kdir/.modinst" modules_install >&2
rustc --version >"$kdir/.vamr-rustc"
if [ ${#kmake[@]} -gt 0 ]; then
	# Modules built against this tree need the same toolchain (lib.sh: kbuild_llvm_args).
	echo "${kmake[0]#LLVM=}" >"$kdir/.vamr-llvm"
fi
echo "$srcver" >"$kdir/.vamr-source-version"
touch "$kdir/.vamr-built"
exec 2>&3
log "kernel built: $kdir"
echo "$kdir"

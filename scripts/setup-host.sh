#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Install, idempotently, everything the host needs to build the vamr test
# kernel and the module and to run the guests, and fetch the kernel source.
#
# - Debian packages: build tools, libclang-19, dkms for the packaging checks
#   of scripts/host-checks.sh, and the user space every guest runs from the
#   host's root (scripts/run-guest.sh, scripts/run-pair.sh): rdma-core
#   (libibverbs, the rxe provider, ibverbs-utils), iproute2 (ip, rdma), kmod
#   (modprobe; depmod on the host), util-linux and mount (mount, mkswap,
#   swapon), busybox-static (the guests power off with its reboot -f),
#   perftest, and for the nodes Open MPI (openmpi-bin, libopenmpi-dev), UCX
#   (libucx0, ucx-utils), libfabric-bin, python3-pyverbs, rdmacm-utils
#   (rping), librdmacm-dev, openssh-server/-client (mpirun starts the remote
#   rank over ssh). All from bookworm. virtme-ng is not installed: Debian has
#   it only in sid, where it would pull sid's libc; the guests boot the
#   host's root over 9p the way virtme-ng does instead (scripts/lib.sh,
#   guest_qemu).
# - qemu-system-x86 from bookworm-backports (apt preference priority 100).
# - trixie-backports and sid, pinned at priority 1 so nothing installed is
#   ever upgraded from them; used only to `apt-get download linux-source-7.3`.
# - rust-src for the rustup toolchain, bindgen-cli via cargo.
# - Only with --sanitize (or VAMR_SANITIZE=1): clang-19, lld-19 and llvm-19,
#   the LLVM toolchain of the sanitizer kernel (scripts/test.sh --sanitize);
#   without it nothing of that is installed or checked.
# - Only with --bench: linux-perf (the perf binary scripts/bench.sh puts in
#   the guest to profile rxe), and clang, lld, llvm and libclang of the LLVM
#   version rustc is built on (clang-22 ... for rustc 1.95; from bookworm's
#   security suite here): the benchmark kernel is built with them, so that
#   CONFIG_RUST_INLINE_HELPERS can inline the kernel's C helpers into Rust.
#
# The mirror URI is read from the machine's own apt sources.
#
# Output: $VAMR_CACHE/src/linux-source-7.3_<version>_all.deb and
#         $VAMR_CACHE/src/kernel-version (the Debian version used).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

need_root() {
	if [ "$(id -u)" != 0 ]; then
		die "setup-host.sh must run as root (it installs Debian packages)"
	fi
}

add_suites() {
	local uri src=/etc/apt/sources.list.d/vamr-extra.sources
	local pref=/etc/apt/preferences.d/vamr-extra
	uri=$(mirror_uri)
	local want
	want=$(cat <<EOT
Types: deb
URIs: $uri
Suites: bookworm-backports trixie-backports sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOT
)
	local want_pref
	want_pref=$(cat <<EOT
Package: *
Pin: release n=bookworm-backports
Pin-Priority: 100

Package: *
Pin: release n=trixie-backports
Pin-Priority: 1

Package: *
Pin: release n=sid
Pin-Priority: 1
EOT
)
	local changed=0
	if [ "$(cat "$src" 2>/dev/null)" != "$want" ]; then
		echo "$want" >"$src"
		changed=1
	fi
	if [ "$(cat "$pref" 2>/dev/null)" != "$want_pref" ]; then
		echo "$want_pref" >"$pref"
		changed=1
	fi
	local stamp=/var/lib/apt/lists/.vamr-updated
	if [ "$changed" = 1 ] || [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +720 2>/dev/null)" ]; then
		log "apt-get update"
		apt-get update -qq || die "apt-get update failed"
		touch "$stamp"
	fi
}

install_debs() {
	local pkgs=(build-essential flex bison bc libelf-dev libssl-dev cpio kmod
		libclang-19-dev rdma-core libibverbs-dev ibverbs-utils
		ibverbs-providers perftest iproute2 busybox-static util-linux mount python3 xz-utils
		pahole dkms strace
		openmpi-bin libopenmpi-dev libucx0 ucx-utils libfabric-bin python3-pyverbs
		rdmacm-utils librdmacm-dev openssh-server openssh-client)
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing: ${missing[*]}"
		# The guests start their own sshd; the host's package must not start
		# one (policy-rc.d "101": no service starts during this install).
		local policy=/usr/sbin/policy-rc.d own_policy=0
		if [ ! -e "$policy" ]; then
			printf '#!/bin/sh\nexit 101\n' >"$policy"
			chmod 0755 "$policy"
			own_policy=1
		fi
		local rc=0
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" || rc=$?
		[ "$own_policy" = 0 ] || rm -f "$policy"
		[ "$rc" = 0 ] || die "apt-get install failed"
	fi
	if ! command -v qemu-system-x86_64 >/dev/null; then
		log "installing qemu-system-x86 from bookworm-backports"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-t bookworm-backports qemu-system-x86
	fi
}

# The sanitizer kernel (KASAN with Rust needs CC_IS_CLANG) is built with
# LLVM=$VAMR_LLVM (lib.sh); clang-19 matches the libclang-19 bindgen uses.
install_llvm() {
	local pkgs=(clang-19 lld-19 llvm-19) missing=() p
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing the LLVM toolchain for the sanitizer kernel: ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
	fi
	command -v "clang$VAMR_LLVM" >/dev/null && command -v "ld.lld$VAMR_LLVM" >/dev/null ||
		die "clang$VAMR_LLVM / ld.lld$VAMR_LLVM not on PATH after installing ${pkgs[*]}"
}

# perf for the guest of scripts/bench.sh (Debian's linux-perf: /usr/bin/perf).
install_perf() {
	if ! dpkg-query -W -f='${Status}' linux-perf 2>/dev/null | grep -q "install ok installed"; then
		log "installing linux-perf for the benchmark guest"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-perf
	fi
	[ -x /usr/bin/perf ] || die "/usr/bin/perf missing after installing linux-perf"
}

# The benchmark kernel's toolchain (build-kernel.sh --bench): LLVM=-<M> with M
# rustc's LLVM major version, and libclang-<M> for its bindgen.
install_bench_llvm() {
	local m pkgs missing=() p
	m=$(rustc_llvm_major)
	[ -n "$m" ] || die "cannot read rustc's LLVM version (rustc -vV)"
	pkgs=("clang-$m" "lld-$m" "llvm-$m" "libclang-$m-dev")
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing the benchmark kernel's toolchain (LLVM $m, rustc's): ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
			die "apt-get install ${missing[*]} failed: the benchmark kernel needs clang of rustc's LLVM $m"
	fi
	command -v "clang-$m" >/dev/null && command -v "ld.lld-$m" >/dev/null ||
		die "clang-$m / ld.lld-$m not on PATH after installing ${pkgs[*]}"
}

install_rust_bits() {
	command -v rustup >/dev/null || die "rustup is not on PATH (need the rustup toolchain)"
	if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
		log "rustup component add rust-src"
		rustup component add rust-src
	fi
	if ! command -v bindgen >/dev/null; then
		log "cargo install bindgen-cli --locked"
		LIBCLANG_PATH=/usr/lib/llvm-19/lib cargo install bindgen-cli --locked --version 0.72.1 ||
			LIBCLANG_PATH=/usr/lib/llvm-19/lib cargo install bindgen-cli --locked
	fi
}

fetch_kernel_source() {
	local dir="$VAMR_CACHE/src"
	mkdir -p "$dir"
	local ver
	ver=$(apt-cache madison linux-source-7.3 2>/dev/null | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' |
		sort -V | tail -n1)
	if [ -z "$ver" ]; then
		die "no linux-source-7.3 package is reachable in trixie-backports or sid; check the apt sources"
	fi
	local deb="$dir/linux-source-7.3_${ver}_all.deb"
	if [ ! -f "$deb" ]; then
		log "apt-get download linux-source-7.3=$ver"
		(cd "$dir" && apt-get download -qq "linux-source-7.3=$ver") ||
			die "apt-get download linux-source-7.3=$ver failed"
		mv "$dir"/linux-source-7.3_*"${ver##*:}"*_all.deb "$deb" 2>/dev/null || true
	fi
	echo "$ver" >"$dir/kernel-version"
	log "kernel source: linux-source-7.3 $ver"
}

sanitize=${VAMR_SANITIZE:-0}
bench=0
for arg in "$@"; do
	case "$arg" in
	--sanitize) sanitize=1 ;;
	--bench) bench=1 ;;
	*) die "usage: setup-host.sh [--sanitize | --bench]" ;;
	esac
done

need_root
add_suites
install_debs
if [ "$sanitize" = 1 ]; then
	install_llvm
fi
if [ "$bench" = 1 ]; then
	install_perf
fi
install_rust_bits
if [ "$bench" = 1 ]; then
	install_bench_llvm
fi
fetch_kernel_source
log "host set-up complete"

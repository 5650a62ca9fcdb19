# SPDX-License-Identifier: GPL-2.0
# Shared helpers for the vamr scripts. Sourced, not run.

# Build cache, kept outside the work tree so a fresh clone reuses it.
: "${VAMR_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/vamr}"
export VAMR_CACHE
# Build outputs and guest logs of this work tree (VAMR_BUILD overrides).
: "${VAMR_BUILD:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}"
export VAMR_BUILD
export PATH="$HOME/.cargo/bin:$PATH"
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
# LLVM= of the sanitizer kernel's build (build-kernel.sh --sanitize): Debian's
# clang-19, ld.lld-19, llvm-ar-19, ... (setup-host.sh --sanitize installs them).
VAMR_LLVM=-19

# The LLVM= setting a kernel tree was built with, as make arguments: none for
# the test kernel, "LLVM=-19" for the sanitizer kernel (it records it in
# .vamr-llvm). Modules must be built with the kernel's toolchain.
kbuild_llvm_args() {
	if [ -f "$1/.vamr-llvm" ]; then
		echo "LLVM=$(cat "$1/.vamr-llvm")"
	fi
}

log() { printf '[vamr] %s\n' "$*" >&2; }
die() { printf '[vamr] error: %s\n' "$*" >&2; exit 1; }

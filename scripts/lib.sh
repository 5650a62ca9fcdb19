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

log() { printf '[vamr] %s\n' "$*" >&2; }
die() { printf '[vamr] error: %s\n' "$*" >&2; exit 1; }

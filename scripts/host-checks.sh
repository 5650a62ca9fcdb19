#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Host-side checks of the packaging, as a TAP section that
# scripts/collect-results.py reads like the guest's (test names host.*):
#   dkms_build       dkms add + build of dkms.conf against KDIR: vamr.ko and
#                    the patched rdma_rxe.ko come out
#   dkms_modinfo     modinfo of both: vamr's version is VERSION (rdma_rxe's
#                    vamr-VERSION), vamr has description, license, author and
#                    parameters, both built
#                    for KDIR's release, rdma_rxe depends on vamr
#   dkms_install     dkms install into a scratch module tree; depmod resolves
#                    the patched rdma_rxe (updates/) against vamr
#   make_install     make install into a staging root: vamr.ko, the uapi
#                    header (compiles alone), the udev rule, vamrctl
# Nothing is installed on the host: dkms runs with throwaway --dkmstree,
# --sourcetree and --installtree, make install with INSTALL_MOD_PATH/DESTDIR.
#
# usage: host-checks.sh KDIR OUT     (OUT: the section, "### BEGIN tap host" ...)
# Log of the commands: OUT's directory, host-checks.log.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kdir=$1 out=$2
log_file="$(dirname "$out")/host-checks.log"
: >"$log_file"
kver=$(cat "$kdir/include/config/kernel.release")
version=$(cat "$top/VERSION")
arch=$(uname -m)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/vamr-host-checks.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

n=0
rc_all=0
tap=()
result() { # name status(0 ok) [why]
	n=$((n + 1))
	if [ "$2" = 0 ]; then
		tap+=("ok $n $1")
	else
		tap+=("not ok $n $1 # ${3:-see $log_file}")
		rc_all=1
	fi
}
skip() { # name why
	n=$((n + 1))
	tap+=("ok $n $1 # SKIP $2")
}
run() { # command...: output to the log
	echo "+ $*" >>"$log_file"
	"$@" >>"$log_file" 2>&1
}

# The package's source: the files git tracks, as they are in the work tree
# (what a release tarball holds; build/ and other outputs stay out).
src="$scratch/src"
mkdir -p "$src"
(cd "$top" && git ls-files -z --cached --others --exclude-standard | \
	xargs -0 -I{} sh -c '[ -f "{}" ] && cp --parents "{}" "'"$src"'"') >>"$log_file" 2>&1

dkms_args=(--dkmstree "$scratch/dkms" --sourcetree "$scratch/usrsrc"
	--installtree "$scratch/root/lib/modules" -k "$kver" --kernelsourcedir "$kdir")
mkdir -p "$scratch/dkms" "$scratch/usrsrc" "$scratch/root/lib/modules"
built="$scratch/dkms/vamr/$version/$kver/$arch/module"

if ! command -v dkms >/dev/null; then
	skip dkms_build "dkms is not installed (scripts/setup-host.sh installs it)"
	skip dkms_modinfo "no dkms"
	skip dkms_install "no dkms"
else
	ok=1
	run dkms add "$src" "${dkms_args[@]}" || ok=0
	[ "$ok" = 1 ] && { run dkms build vamr/"$version" "${dkms_args[@]}" || ok=0; }
	if [ "$ok" = 0 ]; then
		# dkms leaves make.log in the build directory on failure.
		cat "$scratch/dkms/vamr/$version/build/make.log" >>"$log_file" 2>/dev/null
	fi
	[ -f "$built/vamr.ko" ] && [ -f "$built/rdma_rxe.ko" ] || ok=0
	result dkms_build $((1 - ok)) "dkms add/build of vamr/$version for $kver failed or made no vamr.ko and rdma_rxe.ko"

	ok=1 why=""
	if [ -f "$built/vamr.ko" ] && [ -f "$built/rdma_rxe.ko" ]; then
		run modinfo "$built/vamr.ko"
		run modinfo "$built/rdma_rxe.ko"
		v=$(modinfo -F version "$built/vamr.ko")
		[ "$v" = "$version" ] || { ok=0; why="$why vamr version '$v' is not VERSION '$version';"; }
		v=$(modinfo -F version "$built/rdma_rxe.ko")
		[ "$v" = "vamr-$version" ] || { ok=0; why="$why rdma_rxe version '$v' is not vamr-$version;"; }
		for f in description license author parm; do
			[ -n "$(modinfo -F $f "$built/vamr.ko")" ] || { ok=0; why="$why vamr has no $f;"; }
		done
		for m in vamr rdma_rxe; do
			vm=$(modinfo -F vermagic "$built/$m.ko")
			[ "${vm%% *}" = "$kver" ] || { ok=0; why="$why $m vermagic '$vm';"; }
		done
		modinfo -F depends "$built/rdma_rxe.ko" | tr ',' '\n' | grep -qx vamr ||
			{ ok=0; why="$why rdma_rxe does not depend on vamr;"; }
	else
		ok=0 why="nothing built"
	fi
	result dkms_modinfo $((1 - ok)) "$why"

	ok=1 why=""
	if [ -d "$kdir/.modinst/lib/modules/$kver" ]; then
		# The kernel's own modules (the stock rdma_rxe among them) under the scratch root.
		cp -a "$kdir/.modinst/lib/modules/$kver" "$scratch/root/lib/modules/"
		rm -f "$scratch/root/lib/modules/$kver/build" "$scratch/root/lib/modules/$kver/source"
	else
		mkdir -p "$scratch/root/lib/modules/$kver"
	fi
	if [ -f "$built/vamr.ko" ]; then
		run dkms install vamr/"$version" "${dkms_args[@]}" --no-depmod || { ok=0; why="dkms install failed;"; }
		vamr_ko=$(cd "$scratch/root/lib/modules/$kver" && find . -path ./kernel -prune -o -name vamr.ko -print | sed 's|^\./||')
		rxe_ko=$(cd "$scratch/root/lib/modules/$kver" && find . -path ./kernel -prune -o -name rdma_rxe.ko -print | sed 's|^\./||')
		echo "installed: $vamr_ko $rxe_ko" >>"$log_file"
		if [ -n "$vamr_ko" ] && [ -n "$rxe_ko" ]; then
			run depmod -b "$scratch/root" "$kver" || { ok=0; why="$why depmod failed;"; }
			grep -q "^$rxe_ko:.*$vamr_ko" "$scratch/root/lib/modules/$kver/modules.dep" ||
				{ ok=0; why="$why modules.dep does not resolve $rxe_ko against $vamr_ko;"; }
		else
			ok=0 why="$why vamr.ko or rdma_rxe.ko not installed;"
		fi
	else
		ok=0 why="nothing built"
	fi
	result dkms_install $((1 - ok)) "$why"
fi

ok=1 why=""
stage="$scratch/stage"
read -r -a llvm <<<"$(kbuild_llvm_args "$kdir")"
if run make -C "$top" KDIR="$kdir" "${llvm[@]}" INSTALL_MOD_PATH="$stage" DESTDIR="$stage" install; then
	for f in "lib/modules/$kver/updates/vamr.ko" usr/local/include/misc/vamr.h \
		etc/udev/rules.d/60-vamr.rules usr/local/bin/vamrctl; do
		[ -f "$stage/$f" ] || { ok=0; why="$why no $f;"; }
	done
	grep -q 'KERNEL=="vamr", MODE="0666"' "$stage/etc/udev/rules.d/60-vamr.rules" 2>/dev/null ||
		{ ok=0; why="$why the udev rule gives no mode 0666;"; }
	# The installed header is usable alone, as <misc/vamr.h>.
	printf '#include <misc/vamr.h>\nint main(void) { struct vamr_query q = { 0 }; return (int)sizeof(q) - 24; }\n' \
		>"$scratch/hdr.c"
	run cc -Wall -Werror -I"$stage/usr/local/include" -o "$scratch/hdr" "$scratch/hdr.c" && run "$scratch/hdr" ||
		{ ok=0; why="$why the installed header does not compile alone;"; }
	[ "$("$stage/usr/local/bin/vamrctl" --version 2>/dev/null | awk '{ print $2 }')" = "$version" ] ||
		{ ok=0; why="$why vamrctl --version is not VERSION;"; }
else
	ok=0 why="make install failed"
fi
result make_install $((1 - ok)) "$why"

{
	echo "### BEGIN tap host"
	echo "TAP version 13"
	echo "1..$n"
	printf '%s\n' "${tap[@]}"
	echo "### END tap host rc=$rc_all"
} >"$out"
exit "$rc_all"

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
#   make_install     make install, in a copy of the package's source, into a
#                    staging root: vamr.ko, the uapi
#                    header (compiles alone), the udev rule, vamrctl,
#                    libvamr-preload.so
#   checkpatch_<patch>  one per patch of patches/rxe: KDIR's
#                    scripts/checkpatch.pl --strict --no-tree finds nothing,
#                    apart from two warnings that --no-tree cannot settle:
#                    UNKNOWN_COMMIT_ID on a Fixes: line (the commit is
#                    upstream Linux; the test kernel tree is an unpacked
#                    source tree without git history, so checkpatch cannot
#                    look the id up), and FILE_PATH_CHANGES ("does
#                    MAINTAINERS need updating?") when every file the patch
#                    adds lies in a directory that KDIR's MAINTAINERS already
#                    lists (F: drivers/infiniband/sw/rxe/). Anything else, or
#                    one of those two elsewhere, fails; the log has the report.
#   cover_letter     patches/rxe/0000-cover-letter.patch is a git
#                    format-patch cover letter, [PATCH 00/N] for the N patches
#                    there, whose shortlog names every one of them
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
# From the package's source (the copy above), not the work tree: that builds
# vamr.ko the way a packager does, and does not race with scripts/prepare.sh,
# which test.sh runs in the work tree at the same time.
if run make -C "$src" KDIR="$kdir" "${llvm[@]}" INSTALL_MOD_PATH="$stage" DESTDIR="$stage" install; then
	for f in "lib/modules/$kver/updates/vamr.ko" usr/local/include/misc/vamr.h \
		etc/udev/rules.d/60-vamr.rules usr/local/bin/vamrctl usr/local/lib/libvamr-preload.so; do
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

# checkpatch on every patch of the rxe series (the cover letter is no patch).
# The patch is read from stdin: given a file name that git tracks in the
# current directory, checkpatch would check it as a source file.
checkpatch="$kdir/scripts/checkpatch.pl"
patches=()
for p in "$top"/patches/rxe/*.patch; do
	case "$(basename "$p")" in 0000-*) ;; *) patches+=("$p") ;; esac
done
for p in "${patches[@]}"; do
	name=checkpatch_$(basename "$p" .patch)
	if [ ! -f "$checkpatch" ]; then
		result "$name" 1 "no $checkpatch: KDIR must be a kernel source tree"
		continue
	fi
	echo "+ checkpatch.pl --strict --no-tree - <patches/rxe/$(basename "$p")" >>"$log_file"
	# (--terse: one line per finding and a total, or nothing when clean.)
	cp_rc=0
	report=$(cd "$scratch" && perl "$checkpatch" --strict --no-tree --terse --show-types - <"$p" 2>&1) ||
		cp_rc=$?
	echo "$report" >>"$log_file"
	bad="" ignored=""
	# Directories that KDIR's MAINTAINERS lists (F:), for FILE_PATH_CHANGES.
	added=$(awk '/^--- \/dev\/null/ { getline; sub(/^\+\+\+ b\//, ""); print }' "$p")
	while IFS= read -r line; do
		case "$line" in
		-:*) ;;
		total:*) continue ;;
		*) [ -n "$line" ] && bad="$bad [$line]"; continue ;;
		esac
		ln=$(echo "$line" | cut -d: -f2)
		type=$(echo "$line" | sed -n 's/^-:[0-9]*: [A-Z]*:\([A-Z_0-9]*\):.*/\1/p')
		case "$type" in
		UNKNOWN_COMMIT_ID)
			if sed -n "${ln}p" "$p" | grep -q '^Fixes: [0-9a-f]\{12,\} ("'; then
				ignored="$ignored $type@$ln"
				continue
			fi ;;
		FILE_PATH_CHANGES)
			covered=1
			for f in $added; do
				grep -qxF "F:	$(dirname "$f")/" "$kdir/MAINTAINERS" 2>/dev/null || covered=0
			done
			if [ -n "$added" ] && [ "$covered" = 1 ]; then
				ignored="$ignored $type@$ln"
				continue
			fi ;;
		esac
		bad="$bad [$line]"
	done <<<"$report"
	# It fails for findings only: with none (or only those ignored) it must not.
	[ "$cp_rc" = 0 ] || [ -n "$bad" ] || [ -n "$ignored" ] || bad="$bad [checkpatch exit status $cp_rc]"
	[ -n "$ignored" ] && echo "ignored (see host-checks.sh):$ignored" >>"$log_file"
	if [ -z "$bad" ]; then
		result "$name" 0
	else
		result "$name" 1 "$(echo "$bad" | cut -c1-300)"
	fi
done

# The cover letter: [PATCH 00/N] for the N patches, each named in its shortlog.
cover="$top/patches/rxe/0000-cover-letter.patch"
ok=1 why=""
if [ -f "$cover" ]; then
	np=${#patches[@]}
	grep -q "^Subject: \[PATCH 0*0/0*$np\] " "$cover" ||
		{ ok=0; why="$why its Subject is not [PATCH 00/$np];"; }
	for p in "${patches[@]}"; do
		subj=$(sed -n 's/^Subject: \[PATCH[^]]*\] //p' "$p")
		# format-patch shortlogs wrap long subjects; compare the first words.
		short=$(echo "$subj" | cut -c1-40)
		grep -qF "$short" "$cover" || { ok=0; why="$why no '$short' in its shortlog;"; }
	done
else
	ok=0 why="no patches/rxe/0000-cover-letter.patch"
fi
result cover_letter $((1 - ok)) "$why"

{
	echo "### BEGIN tap host"
	echo "TAP version 13"
	echo "1..$n"
	printf '%s\n' "${tap[@]}"
	echo "### END tap host rc=$rc_all"
} >"$out"
exit "$rc_all"

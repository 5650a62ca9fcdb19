#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# VA MRs for unmodified programs (Documentation/va-mr-for-jobs.rst): the
# preload library (libvamr-preload.so) and rdma_rxe's va_mr parameter, each
# run under va_mr_remap, a program that registers plain normal MRs, remaps its
# buffer with raw system calls (munmap + mmap MAP_FIXED, MADV_DONTNEED) and
# lets the peer RDMA READ and WRITE it (every byte checked, position-dependent
# patterns). TAP output.
#
# usage: va_mr_jobs.sh            on the patched rdma_rxe (rxe0), vamr loaded
#        va_mr_jobs.sh --load     with rdma_rxe unloaded (the guest's unload
#                                 phase, section va_mr_jobs_load): vamrctl
#                                 va-mr says rdma_rxe is not loaded; loads it
#                                 with va_mr=1, adds rxe0, checks that plain
#                                 MRs get VA semantics, deletes rxe0 (the
#                                 guest unloads rdma_rxe)
#        va_mr_jobs.sh --stock    on the stock rdma_rxe (the guest's baseline
#                                 section, va_mr_jobs_stock): the preload
#                                 library says the device has no VA MRs and the
#                                 program works with normal MRs, errno as
#                                 without it; vamrctl va-mr says there is no
#                                 va_mr parameter, vamrctl's /dev/vamr
#                                 commands that vamr is not loaded
# Environment: VAMR_PRELOAD (default /usr/local/lib/libvamr-preload.so),
# VAMR_TEST_HELPERS (default /usr/libexec/vamr-tests), VAMR_IBDEV (rxe0).
mode=patched
case "${1:-}" in
--stock) mode=stock ;;
--load) mode=load ;;
esac
preload=${VAMR_PRELOAD:-/usr/local/lib/libvamr-preload.so}
helpers=${VAMR_TEST_HELPERS:-/usr/libexec/vamr-tests}
dev=${VAMR_IBDEV:-rxe0}
param=/sys/module/rdma_rxe/parameters/va_mr
out=/tmp/va_mr_jobs.out
err=/tmp/va_mr_jobs.err
n=0
fails=0

# What the last run printed, as TAP comments: its outcome and va-mr lines,
# and the preload library's and vamrctl's messages.
show() {
	grep -E '^(outcome|va-mr|rdma-res-va|va_mr|device) ' $out | sed 's/^/# /'
	sed 's/^/# stderr: /' $err
}
ok() { show; n=$((n + 1)); echo "ok $n $1"; }
not_ok() {
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n $1 # $2"
	sed 's/^/# stdout: /' $out
	sed 's/^/# stderr: /' $err
}
# run [ENV=VALUE...] PROGRAM ARGS...: $rc, $out, $err
run() { env "$@" >$out 2>$err; rc=$?; }
# outcomes: "scenario op OUTCOME ..." of $out, on one line
outcomes() { awk '$1 == "outcome" { printf "%s:%s:%s ", $2, $3, $4 }' $out; }
# all_outcomes WANT: every remapped access (read, write) came out WANT and
# every access before the remap CORRECT, in both scenarios
all_outcomes() {
	want="munmap_mmap:initial:CORRECT munmap_mmap:read:$1 munmap_mmap:write:$1"
	want="$want dontneed:initial:CORRECT dontneed:read:$1 dontneed:write:$1 "
	[ "$(outcomes)" = "$want" ]
}
# va_mrs WANT: the "va-mr" line of both scenarios says WANT (yes / no), and
# so does rdma -dd res show mr ("va on" / "va off"; no attribute at all on the
# stock rxe)
va_mrs() {
	case "$1:$mode" in
	yes:*) res=on ;;
	no:stock) res=none ;;
	*) res=off ;;
	esac
	[ "$(awk '$1 == "va-mr" { printf "%s ", $3 }' $out)" = "$1 $1 " ] &&
		[ "$(awk '$1 == "rdma-res-va" { printf "%s ", $3 }' $out)" = "$res $res " ]
}
# Lines of the preload library on $err.
preload_lines() { grep -c '^vamr-preload: ' $err; }

case $mode in
stock) total=6 ;;
load) total=4 ;;
*) total=14 ;;
esac
: >$out
: >$err
echo "TAP version 13"
echo "1..$total"

if [ ! -x "$helpers/va_mr_remap" ] || [ ! -f "$preload" ]; then
	i=1
	while [ $i -le $total ]; do
		echo "not ok $i setup # missing $helpers/va_mr_remap or $preload (VAMR_PRELOAD, VAMR_TEST_HELPERS: scripts/guest/init)"
		i=$((i + 1))
	done
	exit 1
fi

if [ $mode = load ]; then
	# rdma_rxe not loaded at all: vamrctl va-mr says so (exit 1).
	run vamrctl va-mr status
	if [ $rc = 1 ] && ! grep -q '^rdma_rxe ' /proc/modules &&
		grep -qx "vamrctl: va-mr: rdma_rxe is not loaded (modprobe rdma_rxe va_mr=1 loads it with the switch on)" $err; then
		ok vamrctl_va_mr_without_rdma_rxe
	else
		not_ok vamrctl_va_mr_without_rdma_rxe "rc=$rc (want 1 and the message)"
	fi
	# Set at load time: modprobe rdma_rxe va_mr=1.
	if ! grep -q '^rdma_rxe ' /proc/modules && modprobe rdma_rxe va_mr=1 2>$err &&
		[ "$(cat $param)" = Y ]; then
		ok modprobe_va_mr_1
	else
		: >$out
		not_ok modprobe_va_mr_1 "rdma_rxe already loaded, or modprobe failed, or $param not Y"
	fi
	rdma link add "$dev" type rxe netdev lo
	i=0
	while [ $i -lt 50 ] && ! grep -qs 0000:0000:0000:0000:0000:ffff:7f00:0001 \
		/sys/class/infiniband/"$dev"/ports/1/gids/*; do
		sleep 0.1
		i=$((i + 1))
	done
	run "$helpers/va_mr_remap"
	if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs yes; then
		ok va_mr_set_at_load_correct
	else
		not_ok va_mr_set_at_load_correct "rc=$rc, outcomes $(outcomes)"
	fi
	run "$helpers/va_mr_remap" --odp
	if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs no; then
		ok va_mr_set_at_load_leaves_odp_mrs_alone
	else
		not_ok va_mr_set_at_load_leaves_odp_mrs_alone "rc=$rc, outcomes $(outcomes)"
	fi
	rdma link delete "$dev"
	[ $fails = 0 ]
	exit
fi

if [ $mode = stock ]; then
	# The stock rdma_rxe: no vamr_access, no va_mr parameter.
	run "$helpers/va_mr_remap"
	if [ $rc = 0 ] && all_outcomes STALE && va_mrs no; then
		ok stock_normal_mrs_stale
	else
		not_ok stock_normal_mrs_stale "rc=$rc, outcomes $(outcomes)"
	fi

	run LD_PRELOAD="$preload" "$helpers/va_mr_remap"
	# The program still works (with normal MRs: stale after the remap, right
	# before it); nothing claims VA semantics.
	if [ $rc = 0 ] && all_outcomes STALE && va_mrs no; then
		ok stock_preload_program_works_with_normal_mrs
	else
		not_ok stock_preload_program_works_with_normal_mrs "rc=$rc, outcomes $(outcomes)"
	fi
	if [ "$(preload_lines)" = 1 ] &&
		grep -q "^vamr-preload: $dev: no VA MRs on this device (no /sys/class/infiniband/$dev/vamr_access): registering normal MRs$" $err &&
		! grep -qi 'virtual-address semantics' $err; then
		ok stock_preload_says_no_va_mrs
	else
		not_ok stock_preload_says_no_va_mrs "want one line naming $dev: no VA MRs, normal MRs"
	fi

	run vamrctl va-mr status
	if [ $rc = 1 ] && grep -q 'the loaded rdma_rxe has no va_mr parameter' $err &&
		grep -q "^device $dev vamr_access=none" $out && [ ! -e $param ]; then
		ok stock_vamrctl_says_no_va_mr_parameter
	else
		not_ok stock_vamrctl_says_no_va_mr_parameter "rc=$rc (want 1 and the message)"
	fi

	# vamr is not loaded here (the guest loads it beside the stock rxe only
	# later): no /dev/vamr, and vamrctl says to load the module (exit 1).
	bad=""
	for args in "caps" "stats --global" "mr-query 1"; do
		# shellcheck disable=SC2086
		run vamrctl $args
		[ $rc = 1 ] && grep -qx "vamrctl: cannot open /dev/vamr: No such file or directory (ENOENT): is the vamr module loaded? (modprobe vamr)" $err ||
			bad="$bad [$args: rc=$rc]"
	done
	if [ -z "$bad" ] && [ ! -e /dev/vamr ]; then
		ok stock_vamrctl_without_vamr_module
	else
		not_ok stock_vamrctl_without_vamr_module "$bad"
	fi

	# errno after a successful registration: the same as without the
	# library (its look for the missing attribute, ENOENT, must not show).
	probe=$helpers/va_mr_preload_probe
	run "$probe" reg "$dev"
	want=$(grep '^errno ' $out)
	run LD_PRELOAD="$preload" "$probe" reg "$dev"
	if [ $rc = 0 ] && [ -n "$want" ] && [ "$(grep '^errno ' $out)" = "$want" ] && grep -qx "mr reg $dev va=no" $out; then
		ok stock_preload_keeps_errno
	else
		not_ok stock_preload_keeps_errno "rc=$rc, want '$want', got '$(grep '^errno ' $out)'"
	fi
	[ $fails = 0 ]
	exit
fi

# The patched rdma_rxe. Whatever happens, va_mr is off again at the end.
trap 'echo 0 >$param 2>/dev/null' EXIT

if [ -f $param ] && [ "$(cat $param)" = N ]; then
	ok va_mr_parameter_default_off
else
	not_ok va_mr_parameter_default_off "$param: '$(cat $param 2>&1)'"
fi

# Control: without help, normal MRs go stale.
run "$helpers/va_mr_remap"
if [ $rc = 0 ] && all_outcomes STALE && va_mrs no; then
	ok control_normal_mrs_stale
else
	not_ok control_normal_mrs_stale "rc=$rc, outcomes $(outcomes)"
fi

run LD_PRELOAD="$preload" "$helpers/va_mr_remap"
if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs yes; then
	ok preload_reg_mr_correct
else
	not_ok preload_reg_mr_correct "rc=$rc, outcomes $(outcomes)"
fi
# One line, naming the device, however many MRs (four here).
if [ "$(preload_lines)" = 1 ] &&
	grep -q "^vamr-preload: $dev: MRs get virtual-address semantics (access flag 0x20000000" $err; then
	ok preload_logs_once_naming_device
else
	not_ok preload_logs_once_naming_device "$(preload_lines) line(s)"
fi

run LD_PRELOAD="$preload" "$helpers/va_mr_remap" --iova2
if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs yes; then
	ok preload_reg_mr_iova2_correct
else
	not_ok preload_reg_mr_iova2_correct "rc=$rc, outcomes $(outcomes)"
fi

# libibverbs in a private scope (dlopen RTLD_LOCAL, as UCX): RTLD_NEXT does
# not find the real functions, the preload library must look further.
run LD_PRELOAD="$preload" "$helpers/va_mr_dlopen"
if [ $rc = 0 ] && grep -q '^# libibverbs is in a private scope' $out &&
	all_outcomes CORRECT && va_mrs yes; then
	ok preload_private_dlopen_correct
else
	not_ok preload_private_dlopen_correct "rc=$rc, outcomes $(outcomes)"
fi
# Control of that: without the library, the same program goes stale.
run "$helpers/va_mr_dlopen"
if [ $rc = 0 ] && grep -q '^# libibverbs is in a private scope' $out &&
	all_outcomes STALE && va_mrs no; then
	ok private_dlopen_control_stale
else
	not_ok private_dlopen_control_stale "rc=$rc, outcomes $(outcomes)"
fi

# ODP MRs are left alone: registered as ODP (VA + ODP would be refused with
# EINVAL), no VA semantics; the ODP of the patched rxe follows the remap.
run LD_PRELOAD="$preload" "$helpers/va_mr_remap" --odp
if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs no; then
	ok preload_leaves_odp_mrs_alone
else
	not_ok preload_leaves_odp_mrs_alone "rc=$rc, outcomes $(outcomes)"
fi

# The system-wide switch, at run time through sysfs.
run vamrctl va-mr on
if [ $rc = 0 ] && [ "$(cat $param)" = Y ] && grep -q '^va_mr on$' $out &&
	grep -q "^device $dev vamr_access=0x20000000$" $out; then
	ok vamrctl_va_mr_on
else
	not_ok vamrctl_va_mr_on "rc=$rc, $param '$(cat $param)'"
fi

run "$helpers/va_mr_remap"
if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs yes && [ ! -s $err ]; then
	ok va_mr_param_correct
else
	not_ok va_mr_param_correct "rc=$rc, outcomes $(outcomes)"
fi

run "$helpers/va_mr_remap" --odp
if [ $rc = 0 ] && all_outcomes CORRECT && va_mrs no; then
	ok va_mr_param_leaves_odp_mrs_alone
else
	not_ok va_mr_param_leaves_odp_mrs_alone "rc=$rc, outcomes $(outcomes)"
fi

# Read at registration: switched off between the first scenario's
# registration and the second's, the first MR keeps VA semantics, the
# second is a normal MR.
run "$helpers/va_mr_remap" --after-reg "$param=0"
want="munmap_mmap:initial:CORRECT munmap_mmap:read:CORRECT munmap_mmap:write:CORRECT"
want="$want dontneed:initial:CORRECT dontneed:read:STALE dontneed:write:STALE "
if [ $rc = 0 ] && [ "$(outcomes)" = "$want" ] && [ "$(cat $param)" = N ] &&
	[ "$(awk '$1 == "va-mr" { printf "%s ", $3 }' $out)" = "yes no " ] &&
	[ "$(awk '$1 == "rdma-res-va" { printf "%s ", $3 }' $out)" = "on off " ]; then
	ok va_mr_read_at_registration
else
	not_ok va_mr_read_at_registration "rc=$rc, outcomes $(outcomes), $param '$(cat $param)'"
fi

run vamrctl va-mr off
if [ $rc = 0 ] && [ "$(cat $param)" = N ] && grep -q '^va_mr off$' $out; then
	ok vamrctl_va_mr_off
else
	not_ok vamrctl_va_mr_off "rc=$rc, $param '$(cat $param)'"
fi

run "$helpers/va_mr_remap"
if [ $rc = 0 ] && all_outcomes STALE && va_mrs no; then
	ok va_mr_off_again_stale
else
	not_ok va_mr_off_again_stale "rc=$rc, outcomes $(outcomes)"
fi

[ $fails = 0 ]

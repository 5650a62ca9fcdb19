#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# libvamr-preload.so (tools/preload, Documentation/va-mr-for-jobs.rst) under
# what real middleware does: first registrations from many threads on two
# devices at once, fork (the child first, and while another thread is in the
# middle of the library's first line), vfork and exec, dlopen/dlclose cycles
# of a private libibverbs and a dlmopen namespace, every registration entry
# point and flag case next to the same program without the library, the entry
# points it must not touch, and a device whose vamr_access attribute cannot
# be read or says nonsense. Each check is on what the program saw: vamr's
# answer for the MR's lkey (VAMR_IOC_MR_QUERY), bytes through RDMA after a
# remap (va_mr_remap), errno, exit status, the library's lines. TAP output.
#
# Needs the patched rdma_rxe with rxe0 on lo (the guest's test phase); adds
# rxe1 on sit0 (module sit) for the two-device checks and deletes it again.
# Environment: VAMR_PRELOAD, VAMR_TEST_HELPERS (as va_mr_jobs.sh).
preload=${VAMR_PRELOAD:-/usr/local/lib/libvamr-preload.so}
helpers=${VAMR_TEST_HELPERS:-/usr/libexec/vamr-tests}
probe=$helpers/va_mr_preload_probe
out=/tmp/va_mr_preload.out
err=/tmp/va_mr_preload.err
base=/tmp/va_mr_preload.base
attr1=/sys/class/infiniband/rxe1/vamr_access
n=0
fails=0
total=13

t0=$(date +%s.%N)
# The seconds since the last ok/not ok, as a TAP comment.
took() { t1=$(date +%s.%N); echo "# took $(echo "$t1 - $t0" | bc 2>/dev/null || echo ?) s"; t0=$t1; }
ok() { took; n=$((n + 1)); echo "ok $n $1"; }
not_ok() {
	took
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n $1 # $2"
	sed 's/^/# stdout: /' $out
	sed 's/^/# stderr: /' $err
}
skip() { n=$((n + 1)); echo "ok $n $1 # SKIP $2"; }
# run [ENV=VALUE...] PROGRAM ARGS...: $rc, $out, $err; 60 s at most
run() { timeout 60 env "$@" >$out 2>$err; rc=$?; }
# count PATTERN FILE: lines of FILE matching the extended regexp
count() { grep -cE "$1" "$2"; }
# Lines of the preload library.
lines() { count '^vamr-preload: ' $err; }
va_line() { echo "^vamr-preload: $1: MRs get virtual-address semantics \\(access flag 0x20000000"; }

echo "TAP version 13"
echo "1..$total"
if [ ! -x "$probe" ] || [ ! -f "$preload" ]; then
	i=1
	while [ $i -le $total ]; do
		echo "not ok $i setup # missing $probe or $preload"
		i=$((i + 1))
	done
	exit 1
fi

# A second device of the patched driver: rxe1 on sit0.
modprobe sit 2>/dev/null
ip link set sit0 up 2>/dev/null
rxe1=no
if rdma link add rxe1 type rxe netdev sit0 2>$err && [ -r $attr1 ]; then
	rxe1=yes
else
	echo "# rxe1 on sit0: $(cat $err)"
fi
cleanup() {
	chmod 0444 $attr1 2>/dev/null
	rdma link delete rxe1 2>/dev/null
}
trap cleanup EXIT

# 1. First registrations of 16 threads at once, on two devices: every MR a VA
# MR, one line per device, however the threads interleave (two processes).
if [ $rxe1 = yes ]; then
	bad=""
	for r in 1 2; do
		run LD_PRELOAD="$preload" "$probe" threads 16 rxe0 rxe1
		if [ $rc != 0 ] || [ "$(count '^mr thread.* va=yes$' $out)" != 64 ] ||
			[ "$(count '^mr ' $out)" != 64 ] || [ "$(lines)" != 2 ] ||
			[ "$(count "$(va_line rxe0)" $err)" != 1 ] ||
			[ "$(count "$(va_line rxe1)" $err)" != 1 ]; then
			bad="round $r: rc=$rc, $(count '^mr thread.* va=yes$' $out) of 64 VA, $(lines) lines"
			break
		fi
	done
	if [ -z "$bad" ]; then
		ok threads_two_devices_one_line_each
	else
		not_ok threads_two_devices_one_line_each "$bad"
	fi
else
	skip threads_two_devices_one_line_each "no rxe1 on sit0"
fi

# 2. fork() before any registration: the child registers first and gets a VA
# MR and its line; the parent after it, its own.
run LD_PRELOAD="$preload" "$probe" fork-first rxe0
if [ $rc = 0 ] && grep -qx 'child first va=yes' $out &&
	grep -qx 'mr parent-after-child rxe0 va=yes' $out && [ "$(lines)" = 2 ] &&
	[ "$(count "$(va_line rxe0)" $err)" = 2 ]; then
	ok fork_child_registers_first
else
	not_ok fork_child_registers_first "rc=$rc, want a VA MR and a line in each process"
fi

# 3. fork() while another thread's first registration is in the middle of the
# library's line (its stderr a full pipe): the child's registration must not
# wait for a thread that does not exist in the child (10 s alarm there).
run LD_PRELOAD="$preload" "$probe" fork-during-log rxe0
if [ $rc = 0 ] && grep -q '^# writer blocked in its stderr write: yes' $out &&
	grep -qx 'child during-log va=yes' $out && grep -qx 'mr writer rxe0 va=yes' $out &&
	[ "$(lines)" = 1 ] && [ "$(count "$(va_line rxe0)" $err)" = 1 ]; then
	ok fork_during_first_line
else
	not_ok fork_during_first_line "rc=$rc, $(grep '^child' $out)"
fi

# 4. vfork() + execve() of a program without RDMA between two registrations.
run LD_PRELOAD="$preload" "$probe" vfork rxe0
if [ $rc = 0 ] && grep -qx 'mr before-vfork rxe0 va=yes' $out &&
	grep -qx 'vfork-exec-true exit 0' $out && grep -qx 'mr after-vfork rxe0 va=yes' $out &&
	[ "$(lines)" = 1 ]; then
	ok vfork_exec
else
	not_ok vfork_exec "rc=$rc"
fi

# 5. exec with LD_PRELOAD inherited: a program without RDMA gets nothing
# loaded and prints nothing; a shell's RDMA children each get VA MRs and say
# so once each.
run LD_PRELOAD="$preload" cat /proc/self/maps
if [ $rc = 0 ] && grep -q 'libvamr-preload.so' $out && ! grep -q 'libibverbs' $out && [ ! -s $err ]; then
	: >$out
	run LD_PRELOAD="$preload" sh -c "$probe reg rxe0 && $probe reg rxe0"
	if [ $rc = 0 ] && [ "$(count '^mr reg rxe0 va=yes$' $out)" = 2 ] && [ "$(lines)" = 2 ]; then
		ok exec_inherits_preload
	else
		not_ok exec_inherits_preload "rc=$rc: the shell's two RDMA children"
	fi
else
	not_ok exec_inherits_preload "rc=$rc: cat with the library loaded libibverbs or printed"
fi

# 6. dlopen / run / dlclose of a library with a private libibverbs, twice in
# one process: VA MRs every time, bytes right after each remap, no
# crash through a pointer into an unloaded libibverbs.
run LD_PRELOAD="$preload" "$helpers/va_mr_dlopen" --cycles 2
grep '^# cycle' $out
if [ $rc = 0 ] && [ "$(count '^outcome .* CORRECT$' $out)" = 12 ] &&
	[ "$(count '^outcome ' $out)" = 12 ] && [ "$(count '^va-mr .* yes$' $out)" = 4 ] &&
	grep -q '^# cycle 1 rc 0 ' $out && [ "$(lines)" = 1 ]; then
	ok dlopen_dlclose_cycles
else
	not_ok dlopen_dlclose_cycles "rc=$rc, $(count '^outcome .* CORRECT$' $out) of 12 CORRECT"
fi

# 7. A dlmopen() namespace: the dynamic linker does not load LD_PRELOAD
# objects into it, so its libibverbs never reaches the library: normal MRs
# (STALE after the remap), no line (the documented limit).
run LD_PRELOAD="$preload" "$helpers/va_mr_dlopen" --dlmopen
if [ $rc = 0 ] && [ "$(count '^outcome .* (read|write) STALE$' $out)" = 4 ] &&
	[ "$(count '^va-mr .* no$' $out)" = 2 ] && [ "$(lines)" = 0 ]; then
	ok dlmopen_namespace_not_reached
else
	not_ok dlmopen_namespace_not_reached "rc=$rc"
fi

# 8. Every registration entry point and flag case, without and with the
# library: the valid ones become VA MRs (ODP ones stay ODP), everything else
# gives the same answer, errno included. ibv_rereg_mr (not wrapped) of a VA
# MR is refused except for a PD change (va-mr-for-jobs.rst).
va_cases=" reg_mr_macro_const reg_mr_macro_optional_bit reg_mr_macro_variable reg_mr_exported"
va_cases="$va_cases reg_mr_iova_macro_const reg_mr_iova_exported reg_mr_iova2 iova2_ends_at_2_64"
va_cases="$va_cases mw_bind_exported mw_bind_iova2 remote_atomic_exported remote_atomic_iova2 "
run "$probe" entry rxe0
mv $out $base
run LD_PRELOAD="$preload" "$probe" entry rxe0
diffs=""
while read -r kind name rest; do
	[ "$kind" = case ] || continue
	got=$(awk -v c="$name" '$1 == "case" && $2 == c { $1 = $2 = ""; sub(/^  /, ""); print }' $out)
	case "$name" in
	reg_mr_already_va) want="$rest" ;;
	rereg_*) want="ERR EOPNOTSUPP va=yes" ;;
	*)
		if [ "${va_cases#* "$name" }" != "$va_cases" ]; then
			want="OK va=yes"
			[ "$rest" = "OK va=no" ] || diffs="$diffs [$name without: $rest]"
		else
			want=$rest
		fi ;;
	esac
	[ "$got" = "$want" ] || diffs="$diffs [$name: '$got', want '$want']"
done <$base
sed 's/^/# without: /' $base
if [ $rc = 0 ] && [ "$(count '^case ' $base)" = "$(count '^case ' $out)" ] &&
	[ "$(count '^case ' $out)" -ge 30 ] && [ -z "$diffs" ] && [ "$(lines)" = 1 ]; then
	ok entry_points_and_flags
else
	not_ok entry_points_and_flags "rc=$rc,$diffs"
fi

# 9. Entry points it must not wrap: the same answers, and the library never
# even looked at the device (no line).
run "$probe" untouched rxe0
mv $out $base
run LD_PRELOAD="$preload" "$probe" untouched rxe0
if [ $rc = 0 ] && cmp -s $base $out && [ "$(lines)" = 0 ]; then
	ok untouched_entry_points
else
	not_ok untouched_entry_points "rc=$rc, $(diff $base $out | tr '\n' ' ')"
fi

# 10-11. rxe1's vamr_access unreadable (mode 0400, an unprivileged user), then
# holding something else than one access flag (a bind mount over it, in a
# mount namespace of its own): rxe0's MRs still get VA semantics, rxe1's are
# normal, and the library says what is wrong with the attribute (not that it
# is missing).
if [ $rxe1 = yes ]; then
	# Copies an unprivileged user can reach (the programs' directory is 0700).
	pub=/tmp/va_mr_preload.pub
	rm -rf $pub && mkdir -m 0755 $pub && cp "$probe" "$preload" $pub/
	chmod 0400 $attr1
	run setpriv --reuid=65534 --regid=65534 --clear-groups \
		env LD_PRELOAD="$pub/${preload##*/}" "$pub/va_mr_preload_probe" reg rxe0 rxe1
	chmod 0444 $attr1
	if [ $rc = 0 ] && grep -qx 'mr reg rxe0 va=yes' $out && grep -qx 'mr reg rxe1 va=no' $out &&
		[ "$(lines)" = 2 ] && [ "$(count "$(va_line rxe0)" $err)" = 1 ] &&
		grep -qx "vamr-preload: rxe1: cannot read $attr1 (Permission denied): registering normal MRs" $err; then
		ok attribute_unreadable_on_one_device
	else
		not_ok attribute_unreadable_on_one_device "rc=$rc"
	fi
	echo junk >/tmp/va_mr_preload.junk
	run unshare -m sh -c "mount --bind /tmp/va_mr_preload.junk $attr1 &&
		exec env LD_PRELOAD='$preload' '$probe' reg rxe0 rxe1"
	if [ $rc = 0 ] && grep -qx 'mr reg rxe0 va=yes' $out && grep -qx 'mr reg rxe1 va=no' $out &&
		[ "$(lines)" = 2 ] &&
		grep -qx "vamr-preload: rxe1: $attr1 says 'junk', not an access flag: registering normal MRs" $err; then
		ok attribute_garbage_on_one_device
	else
		not_ok attribute_garbage_on_one_device "rc=$rc"
	fi
else
	skip attribute_unreadable_on_one_device "no rxe1 on sit0"
	skip attribute_garbage_on_one_device "no rxe1 on sit0"
fi

# 12. VAMR_PRELOAD_QUIET=1: no line, still VA MRs.
run VAMR_PRELOAD_QUIET=1 LD_PRELOAD="$preload" "$probe" reg rxe0
if [ $rc = 0 ] && grep -qx 'mr reg rxe0 va=yes' $out && [ ! -s $err ]; then
	ok quiet_still_va
else
	not_ok quiet_still_va "rc=$rc"
fi

# 13. errno after a successful registration is what it is without the
# library (libibverbs 44 leaves 0).
run "$probe" reg rxe0
want=$(grep '^errno ' $out)
run LD_PRELOAD="$preload" "$probe" reg rxe0
if [ $rc = 0 ] && [ -n "$want" ] && [ "$(grep '^errno ' $out)" = "$want" ]; then
	ok errno_as_without_library
else
	not_ok errno_as_without_library "rc=$rc, want '$want'"
fi

[ $fails = 0 ]

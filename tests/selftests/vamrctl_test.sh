#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# vamrctl (tools/vamrctl, Documentation/vamrctl.rst) in the guest: runs each
# command and checks its output and exit status. TAP output, like the
# kselftest programs; vamrctl must be on PATH (scripts/guest/init puts the
# build's first) and vamr loaded.
n=0
fails=0
out=/tmp/vamrctl_test.out
err=/tmp/vamrctl_test.err

ok() { n=$((n + 1)); echo "ok $n $1"; }
not_ok() {
	n=$((n + 1)); fails=$((fails + 1))
	echo "not ok $n $1 # $2"
	sed 's/^/# stdout: /' $out
	sed 's/^/# stderr: /' $err
}
# run CMD...: $rc, $out, $err
run() { "$@" >$out 2>$err; rc=$?; }
# field NAME: the value after NAME at the start of a line of $out
field() { awk -v k="$1" '$1 == k { print $2; exit }' $out; }

echo "TAP version 13"
echo "1..11"

if ! command -v vamrctl >/dev/null; then
	for i in 1 2 3 4 5 6 7 8 9 10 11; do echo "ok $i vamrctl_missing # SKIP vamrctl not on PATH"; done
	exit 0
fi

run vamrctl --help
if [ $rc = 0 ] && grep -q '^usage: vamrctl' $out && grep -q ' caps ' $out &&
	grep -q ' stats ' $out && grep -q ' watch \[--monitor\] ADDR LEN' $out && grep -q ' mr-query KEY' $out; then
	ok help
else
	not_ok help "rc=$rc, or a command missing from --help"
fi

run vamrctl --version
ver=$(awk '{ print $2 }' $out)
modver=$(cat /sys/module/vamr/version 2>/dev/null)
if [ $rc = 0 ] && [ -n "$ver" ] && [ "$ver" = "$modver" ]; then
	ok version_matches_module
else
	not_ok version_matches_module "rc=$rc, vamrctl '$ver', /sys/module/vamr/version '$modver'"
fi

run vamrctl caps
sed 's/^/# /' $out
feat=$(grep '^features ' $out)
if [ $rc = 0 ] && [ "$(field page_size)" -ge 4096 ] 2>/dev/null &&
	[ "$(field abi_version)" -ge 1 ] 2>/dev/null && [ "$(field module_version)" = "$modver" ] &&
	echo "$feat" | grep -q ' regions' && echo "$feat" | grep -q ' events' &&
	echo "$feat" | grep -q ' mr_query'; then
	ok caps
else
	not_ok caps "rc=$rc or a field missing"
fi

run vamrctl stats --pages 4
if [ $rc = 0 ] && [ "$(field regions)" = 1 ] && [ "$(field pages_pinned)" = 4 ] &&
	grep -q '^scope  *own' $out && grep -q '^invalidations.unmap ' $out; then
	ok stats_own_region
else
	not_ok stats_own_region "rc=$rc, regions '$(field regions)', pages_pinned '$(field pages_pinned)'"
fi

run vamrctl stats --global
if [ $rc = 0 ] && grep -q '^scope  *global' $out && [ "$(field regions)" -ge 0 ] 2>/dev/null &&
	[ "$(field bytes_written)" -ge 0 ] 2>/dev/null; then
	ok stats_global
else
	not_ok stats_global "rc=$rc"
fi

# Each remapping step raises its kind of event on the watched range.
run vamrctl watch 0 16384
sed 's/^/# /' $out
kinds=$(awk '/^step [0-9]+:/ { step = $3 } /^  event / { for (i = 1; i <= NF; i++)
	if ($i ~ /^kind=/) print step "=" substr($i, 6) }' $out | sort -u | tr '\n' ' ')
case "$rc $kinds" in
0*madvise\(MADV_DONTNEED\)=clear*mprotect\(PROT_READ\)=protection_vma*munmap=unmap*)
	if grep -q '^watch: [1-9][0-9]* events, 0 lost' $out; then
		ok watch_reports_each_remap
	else
		not_ok watch_reports_each_remap "no 'watch: N events, 0 lost' line"
	fi ;;
*) not_ok watch_reports_each_remap "rc=$rc, step=kind seen: $kinds" ;;
esac
if [ $rc = 0 ] && echo "$kinds" | grep -q 'mmap(MAP_FIXED)=unmap'; then
	ok watch_mmap_over_is_unmap
else
	not_ok watch_mmap_over_is_unmap "rc=$rc, step=kind seen: $kinds"
fi

# Monitor mode: nothing pinned; DONTNEED, mmap over and munmap raise watch
# records and bump the generation, mprotect raises nothing.
run vamrctl watch --monitor 0 16384
sed 's/^/# /' $out
kinds=$(awk '/^step [0-9]+:/ { step = $3 } /^  event / { for (i = 1; i <= NF; i++)
	if ($i ~ /^kind=/) print step "=" substr($i, 6) }' $out | sort -u | tr '\n' ' ')
gens=$(awk '/^  generation / { print $2 }' $out | tr '\n' ' ')
case "$rc $kinds" in
"0 madvise(MADV_DONTNEED)=watch:clear mmap(MAP_FIXED)=watch:unmap munmap=watch:unmap ")
	if [ "$gens" = "0 0 1 1 2 3 " ] && grep -q '^watch: 3 events, 0 lost' $out; then
		ok watch_monitor_reports_mapping_changes_only
	else
		not_ok watch_monitor_reports_mapping_changes_only "generations seen: $gens"
	fi ;;
*) not_ok watch_monitor_reports_mapping_changes_only "rc=$rc, step=kind seen: $kinds" ;;
esac

# No MR of this process has that key: the same answer as for anyone else's.
run vamrctl mr-query 0x12345
if [ $rc = 1 ] && grep -q 'VAMR_IOC_MR_QUERY key 0x12345: .*(ENOENT): no MR with VA semantics' $err; then
	ok mr_query_missing_key_enoent
else
	not_ok mr_query_missing_key_enoent "rc=$rc (want 1 and ENOENT)"
fi

run vamrctl --device /dev/vamr-nonexistent caps
if [ $rc = 1 ] && grep -q 'cannot open /dev/vamr-nonexistent: .*(ENOENT): is the vamr module loaded' $err; then
	ok missing_device_message
else
	not_ok missing_device_message "rc=$rc"
fi

bad=""
for args in "bogus" "watch" "watch 0x1001 4096" "watch 0 0" "mr-query" "mr-query 0x100000000" \
	"stats --pages 0" "caps extra" "--frobnicate"; do
	# shellcheck disable=SC2086
	run vamrctl $args
	if [ $rc != 2 ] || ! grep -q "Try 'vamrctl --help'" $err; then
		bad="$bad [$args: rc=$rc]"
	fi
done
if [ -z "$bad" ]; then
	ok usage_errors_exit_2
else
	not_ok usage_errors_exit_2 "$bad"
fi

[ $fails = 0 ]

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
echo "1..18"

if ! command -v vamrctl >/dev/null; then
	for i in $(seq 1 17); do echo "ok $i vamrctl_missing # SKIP vamrctl not on PATH"; done
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

# Every RDMA device that shows vamr_access in sysfs (the patched rxe and
# siw) is in caps' device list (VAMR_IOC_DEVICE), by name, with that flag.
missing="" seen=""
for d in /sys/class/infiniband/*; do
	[ -r "$d/vamr_access" ] || continue
	name=${d##*/} flag=$(cat "$d/vamr_access")
	seen="$seen $name"
	grep -q "^device  *$name index [0-9]* access_va $flag\$" $out || missing="$missing $name"
done
if [ -z "$seen" ]; then
	ok "caps_lists_va_devices # SKIP no device shows vamr_access"
elif [ $rc = 0 ] && [ -z "$missing" ]; then
	echo "# devices with VA MRs:$seen"
	ok caps_lists_va_devices
else
	not_ok caps_lists_va_devices "not listed:$missing (rc=$rc)"
fi

# A failing device-list query (strace makes the first VAMR_IOC_DEVICE, the
# second ioctl, fail with EIO) is an error, not a shorter list: exit 1 with
# the call named.
if ! command -v strace >/dev/null; then
	ok "caps_device_query_error_exit_1 # SKIP strace not on PATH"
elif ! grep -q '^features .* devices' $out; then
	ok "caps_device_query_error_exit_1 # SKIP the module lists no devices"
else
	run strace -qq -o /dev/null -e trace=ioctl -e inject=ioctl:error=EIO:when=2 vamrctl caps
	if [ $rc = 1 ] && grep -q 'VAMR_IOC_DEVICE.*EIO' $err && grep -q '^features ' $out; then
		ok caps_device_query_error_exit_1
	else
		not_ok caps_device_query_error_exit_1 "rc=$rc (want 1 and VAMR_IOC_DEVICE: EIO)"
	fi
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

# Output that cannot be written is a failure (exit 1, said on stderr), not
# a silent success: stdout on /dev/full.
bad=""
for args in "--help" "--version" "caps" "stats --global" "va-mr status"; do
	# shellcheck disable=SC2086
	vamrctl $args >/dev/full 2>$err
	rc=$?
	if [ $rc != 1 ] ||
		! grep -qx 'vamrctl: write error on standard output: No space left on device (ENOSPC)' $err; then
		bad="$bad [$args: rc=$rc, $(head -c 200 $err)]"
	fi
done
: >$out
if [ -z "$bad" ]; then
	ok write_error_exit_1
else
	not_ok write_error_exit_1 "$bad"
fi

# Arguments that are not what they look like: --device without its PATH, a
# number with a sign or a blank in front (strtoull would take
# " -18446744073709551615" for 1), numbers and names far too long.
long=$(head -c 5000 /dev/zero | tr '\0' 9)
bad=""
for args in "--device" "stats --pages  -18446744073709551615" "watch 0  -18446744073709547520" \
	"mr-query  -18446744073709551615" "mr-query +1" "stats --pages $long" "mr-query $long"; do
	case "$args" in
	"stats --pages  "*) set -- stats --pages " ${args#stats --pages  }" ;;
	"watch 0  "*) set -- watch 0 " ${args#watch 0  }" ;;
	"mr-query  "*) set -- mr-query " ${args#mr-query  }" ;;
	*)
		# shellcheck disable=SC2086
		set -- $args ;;
	esac
	run vamrctl "$@"
	if [ $rc != 2 ] || ! grep -q "Try 'vamrctl --help'" $err; then
		bad="$bad [$(echo "$args" | cut -c1-40): rc=$rc]"
	fi
done
run vamrctl --device
grep -q "^vamrctl: option '--device' needs a PATH" $err || bad="$bad [--device: $(head -1 $err)]"
run vamrctl "$(head -c 100000 /dev/zero | tr '\0' x)"
[ $rc = 2 ] && grep -q '^vamrctl: unknown command' $err || bad="$bad [100000-byte command: rc=$rc]"
run vamrctl --device "/$(head -c 5000 /dev/zero | tr '\0' x)" caps
[ $rc = 1 ] && grep -q '(ENAMETOOLONG)' $err || bad="$bad [5000-byte --device: rc=$rc]"
if [ -z "$bad" ]; then
	ok odd_arguments
else
	not_ok odd_arguments "$bad"
fi

# A file that is no vamr device, and a device node no driver answers.
run vamrctl --device /dev/null caps
rc1=$rc
grep -q 'VAMR_IOC_QUERY: .*(ENOTTY): not a vamr device' $err
e1=$?
rm -f /tmp/vamrctl-stale
mknod /tmp/vamrctl-stale c 60 0
run vamrctl --device /tmp/vamrctl-stale stats --global
rm -f /tmp/vamrctl-stale
if [ $rc1 = 1 ] && [ $e1 = 0 ] && [ $rc = 1 ] &&
	grep -q 'cannot open /tmp/vamrctl-stale: .*(ENXIO): the device node exists but no driver answers' $err; then
	ok wrong_device_nodes
else
	not_ok wrong_device_nodes "rc=$rc1 (/dev/null), rc=$rc (a node of major 60)"
fi

# As an unprivileged user: /dev/vamr is for everyone (mode 0666: caps and an
# own region work), the system-wide switch is not (refused, unchanged), and a
# node the user may not open says so.
nobody="setpriv --reuid=65534 --regid=65534 --clear-groups"
bad=""
run $nobody vamrctl caps
[ $rc = 0 ] && grep -q '^features ' $out || bad="$bad [caps: rc=$rc]"
run $nobody vamrctl stats --pages 4
[ $rc = 0 ] && [ "$(field pages_pinned)" = 4 ] || bad="$bad [stats: rc=$rc]"
if [ -e /sys/module/rdma_rxe/parameters/va_mr ]; then
	before=$(cat /sys/module/rdma_rxe/parameters/va_mr)
	run $nobody vamrctl va-mr on
	[ $rc = 1 ] && grep -q '(EACCES): only root can change it' $err &&
		[ "$(cat /sys/module/rdma_rxe/parameters/va_mr)" = "$before" ] ||
		bad="$bad [va-mr on: rc=$rc]"
fi
rm -f /tmp/vamrctl-0600
mknod -m 0600 /tmp/vamrctl-0600 c "$(printf '%d' "0x$(stat -c '%t' /dev/vamr)")" \
	"$(printf '%d' "0x$(stat -c '%T' /dev/vamr)")"
run $nobody vamrctl --device /tmp/vamrctl-0600 caps
rm -f /tmp/vamrctl-0600
[ $rc = 1 ] && grep -q 'cannot open /tmp/vamrctl-0600: .*(EACCES): the device is not open to this user' $err ||
	bad="$bad [0600 node: rc=$rc]"
if [ -z "$bad" ]; then
	ok unprivileged_user
else
	not_ok unprivileged_user "$bad"
fi

# mr-query, stats and watch refuse trailing garbage and out-of-range numbers
# the same way (exit 2), and a missing operand of --ib-index / --pages.
bad=""
for args in "mr-query 12x" "stats --pages" "stats --pages 1048577" "watch 0 4294967297" \
	"watch 0x1000 4096 extra" "va-mr maybe" "va-mr on off"; do
	# shellcheck disable=SC2086
	run vamrctl $args
	[ $rc = 2 ] && grep -q "Try 'vamrctl --help'" $err || bad="$bad [$args: rc=$rc]"
done
if [ -z "$bad" ]; then
	ok more_usage_errors_exit_2
else
	not_ok more_usage_errors_exit_2 "$bad"
fi

[ $fails = 0 ]

# SPDX-License-Identifier: GPL-2.0
# Helpers for the commands of a node guest (scripts/guest/node-init sources
# this before the node's command). Sourced, not run. Output for the host goes
# to file descriptor 3 (ttyS1), in the sections of scripts/guest/guest-lib.sh
# (run_tap). The run directory $VAMR_RUN is shared by both nodes (9p,
# read-write): the nodes meet through flag files there, never through the
# network.

# out, run_tap, VAMR_RUN: scripts/guest/guest-lib.sh.
. "$VAMR_TOP/scripts/guest/guest-lib.sh"

# flag NAME: tell the other node NAME happened.
flag() { : >"$VAMR_RUN/flags/$1"; }

# wait_file FILE SECONDS: wait until FILE exists, looking every 0.1 s;
# status 1 after SECONDS. One bash process, whose read -t waits without
# starting one (a sleep per look costs tens of milliseconds of emulated CPU
# under TCG, ten times a second, taken from whatever else runs).
wait_file() {
	[ -e "$1" ] && return 0
	bash -c 'n=$(($2 * 10)); exec 9<>"$3"
		while [ ! -e "$1" ]; do
			n=$((n - 1)); [ "$n" -gt 0 ] || exit 1
			read -r -t 0.1 -u 9 _
		done
		exit 0' wait_file "$1" "$2" "$(nap_fifo)"
}

# nap_fifo: a FIFO nobody writes, for bash's read -t as a sleep (wait_file,
# serve_commands).
nap_fifo() {
	[ -p /run/vamr-nap ] || mkfifo /run/vamr-nap 2>/dev/null
	echo /run/vamr-nap
}

# wait_flag NAME [seconds]: wait (default 300 s) for the other node's flag;
# status 1 on timeout.
wait_flag() { wait_file "$VAMR_RUN/flags/$1" "${2:-300}"; }

# cm_listening PORT [seconds]: wait (default 60 s) until an rdma_cm id of
# this node listens on PORT (rdma resource show cm_id: "state LISTEN ...
# src-addr ADDR:PORT"); status 1 on timeout. Node a starts a server on node b
# with on_b "server & cm_listening PORT": on_b returns once the server is
# ready, instead of after a fixed sleep.
cm_listening() {
	_n=$((${2:-60} * 20))
	until rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*:$1( |\$)"; do
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || { echo "# cm_listening: nothing listens on port $1" >&2; return 1; }
		sleep 0.05
	done
}

# tcp_listening PORT [seconds]: wait (default 60 s) until a TCP socket of
# this node listens on PORT (ss); status 1 on timeout.
tcp_listening() {
	_n=$((${2:-60} * 20))
	until ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; do
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || { echo "# tcp_listening: nothing listens on port $1" >&2; return 1; }
		sleep 0.05
	done
}

# roce_v2_gid_index DEV PREFIX: the index, in port 1's GID table of DEV, of
# the first RoCE v2 GID that starts with PREFIX (sysfs notation). Found in the
# table, never assumed: the kernel fills it in the order the netdev's
# addresses appear (on the nodes: IPv6 link-local, then the IPv4 address).
# Read from the copy gid_table saved when there is one and it has the GID,
# else from the device (gid_table_now).
roce_v2_gid_index() {
	if [ -f "/run/vamr-gids.$1" ]; then
		_i=$(_roce_v2_first "$2" <"/run/vamr-gids.$1") && echo "$_i" && return 0
	fi
	gid_table_now "$1" | _roce_v2_first "$2"
}

# _roce_v2_first PREFIX: the index of the first line of a GID table on stdin
# (gid_table's lines) whose GID starts with PREFIX and whose type is RoCE v2;
# status 1 when there is none.
_roce_v2_first() {
	while read -r _i _g _t1 _t2 _rest; do
		case "$_g" in
		"$1"*) [ "$_t1 $_t2" = "RoCE v2" ] && echo "$_i" && return 0 ;;
		esac
	done
	return 1
}

# gid_table_now DEV: the non-empty entries of port 1's GID table of DEV, one
# a line: index, GID, type, netdev, in sysfs notation ($VAMR_BUILD/pair/
# gid_table, tests/pair/gid_table.c: one ioctl per entry; rxe has 1024, and
# reading them from sysfs took 2.5 s under TCG, 5-14 s under load, where
# the ioctls take 0.1 s).
gid_table_now() { "$VAMR_BUILD/pair/gid_table" "$1"; }

# roce_v2_ipv4_gid_index DEV: the RoCE v2 GID of the netdev's IPv4 address
# (::ffff:a.b.c.d), the one rdma_cm resolves an IPv4 address to.
roce_v2_ipv4_gid_index() { roce_v2_gid_index "$1" 0000:0000:0000:0000:0000:ffff:; }

# roce_v2_link_local_gid_index DEV: the RoCE v2 GID of the netdev's IPv6
# link-local address (fe80::/64), the one UCX 1.13 gets through with
# (Documentation/two-nodes.rst, "GID index": its UD wireup times out with the
# IPv4-mapped GID on rxe).
roce_v2_link_local_gid_index() { roce_v2_gid_index "$1" fe80:0000:0000:0000:; }

# gid_table DEV: the non-empty entries of port 1's GID table (gid_table_now),
# also saved to /run/vamr-gids.DEV for roce_v2_gid_index (the nodes' link
# does not change after the set-up).
gid_table() {
	gid_table_now "$1" >"/run/vamr-gids.$1.tmp" || return 1
	mv "/run/vamr-gids.$1.tmp" "/run/vamr-gids.$1"
	cat "/run/vamr-gids.$1"
}

# serve_commands: node b's loop: run the commands node a drops into
# $VAMR_RUN/cmd/ (N.sh, in order; N.go says N.sh is complete) until node a's
# flag done_a; output to N.out, exit status to N.rc, then N.done. Control
# traffic through the shared directory costs a fraction of a second where an
# ssh login costs 10-25 s under TCG; ssh stays what mpirun uses to start the
# remote rank. Both sides poll with as few processes as they can: under TCG
# each process a poll starts costs tens of milliseconds or more.
serve_commands() {
	# Under bash, whose read -t waits without starting a process.
	bash -c '. "$VAMR_TOP/scripts/guest/node-lib.sh"; exec 9<>"$(nap_fifo)"
		i=0
		while [ ! -e "$VAMR_RUN/flags/done_a" ]; do
			if [ -e "$VAMR_RUN/cmd/$i.go" ]; then
				(cd /tmp && . "$VAMR_RUN/cmd/$i.sh") >"$VAMR_RUN/cmd/$i.out" 2>&1 </dev/null
				echo $? >"$VAMR_RUN/cmd/$i.rc"
				: >"$VAMR_RUN/cmd/$i.done"
				i=$((i + 1))
			else
				read -r -t 0.1 -u 9 _
			fi
		done'
}

# on_b COMMAND: run shell COMMAND on node b (serve_commands), print its
# output, return its exit status (1 after 600 s without an answer). A
# command that starts a server must put it in the background with its output
# redirected. COMMAND runs in a subshell of node b's loop, which has
# node-lib.sh's functions (cm_listening, tcp_listening, reap).
on_b() {
	# The next number, kept in a file (on_b often runs in a command
	# substitution, a subshell): only node a writes commands, one at a time.
	_c=0
	[ -e "$VAMR_RUN/cmd/next" ] && read -r _c <"$VAMR_RUN/cmd/next"
	echo $((_c + 1)) >"$VAMR_RUN/cmd/next"
	printf '%s\n' "$*" >"$VAMR_RUN/cmd/$_c.sh"
	: >"$VAMR_RUN/cmd/$_c.go"
	wait_file "$VAMR_RUN/cmd/$_c.done" 600 ||
		{ echo "on_b: no answer from node b to: $*" >&2; return 1; }
	cat "$VAMR_RUN/cmd/$_c.out"
	read -r _rc <"$VAMR_RUN/cmd/$_c.rc"
	return "$_rc"
}

# vamr_global: vamr's module-wide counters on this node, "NAME VALUE" lines
# of vamrctl stats --global.
vamr_global() { "$VAMR_BUILD/tools/vamrctl" stats --global 2>&1; }

# vamr_bytes: the bytes rxe moved through VA MRs so far on this node:
# bytes_read + bytes_written ("unknown" when vamrctl fails).
vamr_bytes() {
	vamr_global | awk '$1 == "bytes_read" || $1 == "bytes_written" { n += $2; seen++ }
		END { if (seen == 2) print n; else print "unknown" }'
}

# vamr_regions: the VA regions live now on this node: the "regions" gauge.
vamr_regions() {
	vamr_global | awk '$1 == "regions" { print $2; seen = 1 } END { if (!seen) print "unknown" }'
}

# no_local_va_regions: waits up to 30 s until this node has no live VA
# region, so that the module-wide byte counters read next move only for the
# program under test. Where the wait runs out, prints "# " lines with the
# regions and the MRs still live (rdma res show mr: pid, comm) and returns 1.
no_local_va_regions() {
	_i=0
	while [ "$_i" -lt 60 ]; do
		[ "$(vamr_regions)" = 0 ] && return 0
		sleep 0.5
		_i=$((_i + 1))
	done
	echo "# node $(hostname): VA regions still live after 30 s: $(vamr_regions)"
	rdma res show mr 2>&1 | sed "s/^/# node $(hostname): /"
	return 1
}

# reap NAME...: ends the processes of these names (SIGTERM, then SIGKILL after
# 10 s) and waits for them; prints which ones were still running. One pgrep
# when nothing runs.
reap() {
	_re=$(echo "$@" | tr ' ' '|')
	# (pgrep warns about patterns longer than a process name; they match.)
	pgrep -x "$_re" >/dev/null 2>&1 || return 0
	_left=$(pgrep -x -l "$_re" 2>/dev/null | awk '{ print $2 }' | sort -u | tr '\n' ' ')
	[ -n "$_left" ] || return 0
	echo "# node $(hostname): ending what is still running: $_left"
	for _p in $_left; do pkill -x "$_p"; done
	_i=0
	while [ "$_i" -lt 20 ]; do
		pgrep -x "$_re" >/dev/null 2>&1 || return 0
		sleep 0.5
		_i=$((_i + 1))
	done
	for _p in $_left; do pkill -9 -x "$_p"; done
}

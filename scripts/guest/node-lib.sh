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

# wait_flag NAME [seconds]: wait (default 300 s) for the other node's flag;
# status 1 on timeout.
wait_flag() {
	_n=$((${2:-300} * 10))
	while [ ! -e "$VAMR_RUN/flags/$1" ]; do
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || return 1
		sleep 0.1
	done
}

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
roce_v2_gid_index() {
	# One grep over the table (1024 entries on rxe), not a process per entry.
	for _i in $(grep -l "^$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null |
		sed 's|.*/||' | sort -n); do
		[ "$(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/types/"$_i" 2>/dev/null)" = "RoCE v2" ] ||
			continue
		echo "$_i"
		return 0
	done
	return 1
}

# roce_v2_ipv4_gid_index DEV: the RoCE v2 GID of the netdev's IPv4 address
# (::ffff:a.b.c.d), the one rdma_cm resolves an IPv4 address to.
roce_v2_ipv4_gid_index() { roce_v2_gid_index "$1" 0000:0000:0000:0000:0000:ffff:; }

# roce_v2_link_local_gid_index DEV: the RoCE v2 GID of the netdev's IPv6
# link-local address (fe80::/64), the one UCX 1.13 gets through with
# (Documentation/two-nodes.rst, "GID index": its UD wireup times out with the
# IPv4-mapped GID on rxe).
roce_v2_link_local_gid_index() { roce_v2_gid_index "$1" fe80:0000:0000:0000:; }

# gid_table DEV: the non-empty entries of port 1's GID table, one a line:
# index, GID, type, netdev.
gid_table() {
	grep -v '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null |
		sed 's|^.*/gids/\([0-9]*\):|\1 |' | sort -n | while read -r _i _v; do
		echo "$_i $_v $(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/types/"$_i" 2>/dev/null)" \
			"$(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/ndevs/"$_i" 2>/dev/null)"
	done
}

# serve_commands: node b's loop: run the commands node a drops into
# $VAMR_RUN/cmd/ (N.sh, in order) until node a's flag done_a; output to N.out,
# exit status to N.rc. Control traffic through the shared directory costs a
# fraction of a second where an ssh login costs 10-25 s under TCG; ssh stays
# what mpirun uses to start the remote rank.
serve_commands() {
	_i=0
	while [ ! -e "$VAMR_RUN/flags/done_a" ]; do
		if [ -e "$VAMR_RUN/cmd/$_i.sh" ]; then
			(cd /tmp && sh "$VAMR_RUN/cmd/$_i.sh") >"$VAMR_RUN/cmd/$_i.out" 2>&1 </dev/null
			echo $? >"$VAMR_RUN/cmd/$_i.rc.tmp"
			mv "$VAMR_RUN/cmd/$_i.rc.tmp" "$VAMR_RUN/cmd/$_i.rc"
			_i=$((_i + 1))
		else
			sleep 0.2
		fi
	done
}

# on_b COMMAND: run shell COMMAND on node b (serve_commands), print its
# output, return its exit status (1 after 600 s without an answer). A
# command that starts a server must put it in the background with its output
# redirected.
on_b() {
	mkdir -p "$VAMR_RUN/cmd"
	# The next number: only node a writes commands, one at a time.
	_c=$(ls "$VAMR_RUN/cmd" | grep -c '^[0-9]*\.sh$')
	printf '%s\n' "$*" >"$VAMR_RUN/cmd/$_c.sh.tmp"
	mv "$VAMR_RUN/cmd/$_c.sh.tmp" "$VAMR_RUN/cmd/$_c.sh"
	_n=6000
	while [ ! -e "$VAMR_RUN/cmd/$_c.rc" ]; do
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || { echo "on_b: no answer from node b to: $*" >&2; return 1; }
		sleep 0.1
	done
	cat "$VAMR_RUN/cmd/$_c.out"
	return "$(cat "$VAMR_RUN/cmd/$_c.rc")"
}

# reap NAME...: ends the processes of these names (SIGTERM, then SIGKILL after
# 10 s) and waits for them; prints which ones were still running.
reap() {
	_left=""
	for _p in "$@"; do pgrep -x "$_p" >/dev/null && _left="$_left $_p"; done
	[ -n "$_left" ] || return 0
	echo "# node $(hostname): ending what is still running:$_left"
	for _p in $_left; do pkill -x "$_p"; done
	_i=0
	while [ "$_i" -lt 20 ]; do
		_alive=""
		for _p in $_left; do pgrep -x "$_p" >/dev/null && _alive=1; done
		[ -n "$_alive" ] || return 0
		sleep 0.5
		_i=$((_i + 1))
	done
	for _p in $_left; do pkill -9 -x "$_p"; done
}

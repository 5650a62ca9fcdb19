# SPDX-License-Identifier: GPL-2.0
# Helpers for the commands of a node guest (scripts/guest/node-init sources
# this before the node's command). Sourced, not run. Output for the host goes
# to file descriptor 3 (ttyS1), in sections:
#   ### BEGIN <kind> <name> / ... / ### END <kind> <name> rc=<exit code>
# The run directory $VAMR_RUN is shared by both nodes (9p, read-write): the
# nodes meet through flag files there, never through the network.

VAMR_RUN=/run/vamr
export VAMR_RUN

out() { echo "$@" >&3; }

# run_tap kind name command...: the command's output as one section.
run_tap() {
	_kind=$1 _name=$2
	shift 2
	out "### BEGIN $_kind $_name"
	"$@" >&3 2>&1
	_rc=$?
	out "### END $_kind $_name rc=$_rc"
	return $_rc
}

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

# roce_v2_ipv4_gid_index DEV: the index, in port 1's GID table of DEV, of the
# RoCE v2 GID that maps the netdev's IPv4 address (::ffff:a.b.c.d). Found in
# the table, never assumed: rxe fills it in the order the addresses appear
# (IPv6 link-local first, each as a RoCE v1 and a RoCE v2 entry).
roce_v2_ipv4_gid_index() {
	for _g in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		_i=${_g##*/}
		case "$(cat "$_g" 2>/dev/null)" in
		0000:0000:0000:0000:0000:ffff:*) ;;
		*) continue ;;
		esac
		[ "$(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/types/"$_i" 2>/dev/null)" = "RoCE v2" ] ||
			continue
		echo "$_i"
		return 0
	done
	return 1
}

# gid_table DEV: the non-empty entries of port 1's GID table, one a line:
# index, GID, type, netdev.
gid_table() {
	for _g in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		_i=${_g##*/}
		_v=$(cat "$_g" 2>/dev/null) || continue
		[ "$_v" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
		echo "$_i $_v $(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/types/"$_i" 2>/dev/null)" \
			"$(cat /sys/class/infiniband/"$1"/ports/1/gid_attrs/ndevs/"$_i" 2>/dev/null)"
	done | sort -n
}

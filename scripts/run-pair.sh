#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot two node guests joined by a private link and run a command on each.
#
# usage: run-pair.sh KDIR LOGDIR CMD_A CMD_B
#   CMD_A, CMD_B  shell code run in node a (nodea, 10.11.0.1) and node b
#                 (nodeb, 10.11.0.2), sourced by scripts/guest/node-init after
#                 the set-up, with the helpers of scripts/guest/node-lib.sh
#   LOGDIR        receives a/ and b/, each with console.log (ttyS0),
#                 results.log (ttyS1) and qemu.log, and run/, the directory
#                 both guests share (per-run ssh keys, flags)
#
# Each guest runs the kernel KDIR on the host's root file system, read-only
# over virtio-9p (mount tag /dev/root, init scripts/guest/node-init), the way
# virtme-ng boots the host's user space, with tmpfs where it writes. Its NIC
# (eth0) is a virtio-net on a QEMU "dgram" netdev whose two ends are unix
# datagram sockets in LOGDIR: the frames of one guest go to the other one and
# nowhere else (no host network stack, no route out). When the patched siw is
# staged (scripts/build-swdrv.sh), each node has a second NIC the same way, on
# a second link of its own (eth1, 10.233.1.1 and 10.233.1.2): soft-iWARP's
# (siw0), so that the RDMA CM finds siw0, and only siw0, for those addresses
# (rxe0 stays on eth0). No other NIC.
#
# Watchdog: VAMR_TIMEOUT (seconds, default 900) bounds the pair; when a guest
# fails (QEMU error, no end marker) or the time is up, both are torn down.
# Exit status: 0 when both guests reached their end marker, 124 on a
# watchdog timeout, 1 otherwise. TCG unless VAMR_ACCEL=kvm.
#
# Node b boots with a Movable zone (VAMR_PAIR_B_ARGS, appended to its kernel
# command line; default movablecore=50%, empty: none): its processes' memory
# is allocated there first, so every long-term pin on node b (the MRs of the
# rdma_remote, rping and perftest servers and of the MPI rank, VA MRs
# included) migrates its pages out of the zone first, and node b runs
# rdma_movable (tests/pair/node-b.sh). Node a keeps an ordinary layout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

[ $# = 4 ] || die "usage: run-pair.sh KDIR LOGDIR CMD_A CMD_B"
kdir=$1 logdir=$2 cmd_a=$3 cmd_b=$4
timeout_s=${VAMR_TIMEOUT:-900}
check_guest_kernel "$kdir"
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || die "sshd missing: run scripts/setup-host.sh"

rm -rf "$logdir"
mkdir -p "$logdir/a" "$logdir/b" "$logdir/run/flags" "$logdir/run/ssh" "$logdir/run/out" "$logdir/run/cmd"
logdir=$(realpath "$logdir")
run=$logdir/run
# The modules the nodes load: the kernel's, vamr.ko, the patched rdma_rxe.
stage_guest_modules "$kdir" "$run"
# Per-run keys: the nodes' host key and root's login key.
ssh-keygen -q -t ed25519 -N '' -C "vamr-pair-host" -f "$run/ssh/ssh_host_ed25519_key"
ssh-keygen -q -t ed25519 -N '' -C "vamr-pair-root" -f "$run/ssh/id_ed25519"
{
	echo "nodea,10.11.0.1 $(cat "$run/ssh/ssh_host_ed25519_key.pub")"
	echo "nodeb,10.11.0.2 $(cat "$run/ssh/ssh_host_ed25519_key.pub")"
} >"$run/ssh/known_hosts"
# The patched siw, when staged: siw's link (the nodes' eth1), MACs next to
# those of the first link (boot, below).
siw_mac_a=52:54:00:12:35:01 siw_mac_b=52:54:00:12:35:02
siw=0
if ls "$run"/modroot/lib/modules/*/updates/siw.ko* >/dev/null 2>&1; then
	siw=1
fi
guest_env "$kdir" "$run"
cat >>"$run/guest.env" <<EOF
VAMR_NODE_a=nodea
VAMR_NODE_b=nodeb
VAMR_IP_a=10.11.0.1
VAMR_IP_b=10.11.0.2
VAMR_SIW_IP_a=10.233.1.1
VAMR_SIW_IP_b=10.233.1.2
VAMR_SIW_MAC_a=$siw_mac_a
VAMR_SIW_MAC_b=$siw_mac_b
export VAMR_NODE_a VAMR_NODE_b VAMR_IP_a VAMR_IP_b VAMR_SIW_IP_a VAMR_SIW_IP_b VAMR_SIW_MAC_a VAMR_SIW_MAC_b
EOF
# Settings of the two-node tests (tests/pair/node-a.sh) pass through.
for v in VAMR_PAIR_BREAK VAMR_PAIR_TESTS VAMR_PAIR_MODES VAMR_REMOTE_MODES VAMR_SIW_REMOTE_MODES VAMR_MPI_ITERATIONS VAMR_MPI_MIB \
	VAMR_PERF_ITERATIONS VAMR_FABRIC_ITERATIONS; do
	if [ -n "${!v:-}" ]; then
		printf '%s=%q\nexport %s\n' "$v" "${!v}" "$v" >>"$run/guest.env"
	fi
done
printf '%s\n' "$cmd_a" >"$run/cmd_a.sh"
printf '%s\n' "$cmd_b" >"$run/cmd_b.sh"

# The link: each end a unix datagram socket, sending to the other one.
# siw's link the same way, with sockets of its own.
sock_a=$logdir/link-a.sock sock_b=$logdir/link-b.sock
siw_sock_a=$logdir/siw-a.sock siw_sock_b=$logdir/siw-b.sock
rm -f "$sock_a" "$sock_b" "$siw_sock_a" "$siw_sock_b"

boot() { # node mac local-socket remote-socket
	local node=$1 mac=$2 lsock=$3 rsock=$4 args="vamr_node=$1" siw_nic=() smac ssock rssock
	if [ "$node" = b ]; then
		args+=${VAMR_PAIR_B_ARGS-" movablecore=50%"}
	fi
	# siw's NIC after the first one: the first PCI slot, eth0, stays rxe's.
	if [ "$siw" = 1 ]; then
		smac=siw_mac_$node
		ssock=$siw_sock_a rssock=$siw_sock_b
		[ "$node" = b ] && ssock=$siw_sock_b rssock=$siw_sock_a
		siw_nic=(-netdev dgram,id=siwlink,local.type=unix,local.path="$ssock",remote.type=unix,remote.path="$rssock"
			-device virtio-net-pci,netdev=siwlink,mac="${!smac}")
	fi
	guest_qemu "$timeout_s" "$kdir" "$top/scripts/guest/node-init" "$run" "$logdir/$node" "$args" \
		-smp 1 -m 1536M \
		-netdev dgram,id=link,local.type=unix,local.path="$lsock",remote.type=unix,remote.path="$rsock" \
		-device virtio-net-pci,netdev=link,mac="$mac" "${siw_nic[@]}" -nic none
}

# One boot of the pair, until both nodes ended or one failed (then both are
# torn down): status 0, 1, or 124 (a watchdog).
run_pair() {
	log "booting the two nodes (${VAMR_ACCEL:-tcg}, watchdog ${timeout_s}s): logs in $logdir"
	# QEMU binds each local socket when it starts; the first datagrams of the
	# other guest may be lost until then (nothing is sent before both booted).
	(boot a 52:54:00:12:34:01 "$sock_a" "$sock_b") &
	pid_a=$!
	(boot b 52:54:00:12:34:02 "$sock_b" "$sock_a") &
	pid_b=$!
	teardown() {
		kill "$pid_a" "$pid_b" 2>/dev/null || true
		wait "$pid_a" "$pid_b" 2>/dev/null || true
	}
	trap teardown EXIT INT TERM

	done_ok() { grep -q '^### GUEST DONE' "$logdir/$1/results.log" 2>/dev/null; }
	rc=0
	# The first guest to end: if it did not reach its end marker, the other one
	# is torn down at once.
	first_rc=0
	wait -n "$pid_a" "$pid_b" || first_rc=$?
	for n in a b; do
		pid_var=pid_$n
		if ! kill -0 "${!pid_var}" 2>/dev/null; then
			if ! done_ok "$n"; then
				[ "$first_rc" = 124 ] || [ "$first_rc" = 137 ] &&
					log "watchdog: node $n did not finish within ${timeout_s}s" ||
					log "node $n ended without its end marker (status $first_rc); tearing the pair down"
				teardown
				rc=1
				[ "$first_rc" = 124 ] || [ "$first_rc" = 137 ] && rc=124
			fi
		fi
	done
	if [ "$rc" = 0 ]; then
		# The other guest: within what is left of the watchdog.
		for n in a b; do
			pid_var=pid_$n
			r=0
			wait "${!pid_var}" 2>/dev/null || r=$?
			if ! done_ok "$n"; then
				if [ "$r" = 124 ] || [ "$r" = 137 ]; then
					log "watchdog: node $n did not finish within ${timeout_s}s"
					rc=124
				else
					log "node $n ended without its end marker (status $r)"
					[ "$rc" = 124 ] || rc=1
				fi
				teardown
			fi
		done
	fi
	trap - EXIT INT TERM
	teardown
	return "$rc"
}

t0=$SECONDS
rc=0
run_pair || rc=$?
# QEMU's own crash while a node's kernel booted (see qemu_aborted_in_boot in
# scripts/lib.sh): the pair once more, the first attempt's logs kept.
if [ "$rc" != 0 ] && { qemu_aborted_in_boot "$logdir/a" || qemu_aborted_in_boot "$logdir/b"; }; then
	log "QEMU aborted while a node's kernel booted; booting the pair once more (first attempt: $logdir/{a,b}/*.aborted)"
	keep_aborted_logs "$logdir/a"
	keep_aborted_logs "$logdir/b"
	# What the nodes write in the run directory: out/ (outputs), flags/ (their rendezvous).
	rm -rf "$run/out" "$run/flags"
	mkdir -p "$run/out" "$run/flags"
	rm -f "$sock_a" "$sock_b" "$siw_sock_a" "$siw_sock_b"
	rc=0
	run_pair || rc=$?
fi
rm -f "$sock_a" "$sock_b" "$siw_sock_a" "$siw_sock_b"
log "pair finished in $((SECONDS - t0))s (status $rc)"
exit "$rc"

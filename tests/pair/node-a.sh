# SPDX-License-Identifier: GPL-2.0
# Node a of the two-node tests (scripts/run-pair.sh; sourced by
# scripts/guest/node-init with scripts/guest/node-lib.sh). Node b serves; this
# node drives everything: mpirun starts the remote rank over ssh, the other
# commands for node b go through the run directory (on_b, node-lib.sh).
#
# Sections (results.log of node a):
#   demo gid_table_a        port 1's GID table of rxe0
#   tap  pair_link          the link: only eth0, no route out, ssh and the
#                           RoCE v2 GID index found the same on both nodes
#   tap  mpi_remap          tests/mpi/mpi_remap under Open MPI's mpirun over
#                           ssh, PML ucx, once per MR mode ("# vamr-mpi" lines:
#                           the table of scripts/collect-results.py)
#   tap  rdma_remote        tests/pair/rdma_remote: rdma_va's remap scenarios
#                           with the MR on node b and the requester on node a
#   tap  rdma_remote_siw    the same over soft-iWARP (siw0 on eth1, siw's own
#                           link), normal and VA MRs; with rdma_remote, when
#                           the patched siw is staged
#   tap  rping              rping over rdma_cm, data validated (-V)
#   tap  perftest           ib_write_bw over rdma_cm (-R): completes; its
#                           bandwidth figures mean nothing under TCG
#   tap  libfabric          fi_pingpong (libfabric's verbs provider, data
#                           checked) per MR mode; with va_mr and the preload
#                           library its bytes go through VA MRs on both nodes
# and one section of node b (tests/pair/node-b.sh), run before node b is ready:
#   tap  movable            tests/selftests/rdma_movable on node b, which boots
#                           with a Movable zone (scripts/run-pair.sh)
#
# VAMR_PAIR_TESTS (space-separated, default all of the above but the table)
# selects sections; VAMR_PAIR_BREAK=1 inverts the expectation of the stock
# mode (run-pair break check: the suite must fail).

# MR modes, data-driven: name, what makes it available, how it is set up.
# stock:   the patched rdma_rxe with va_mr=0 (normal MRs)
# va_mr:   system-wide VA MRs, /sys/module/rdma_rxe/parameters/va_mr=1
# preload: per process, LD_PRELOAD=$VAMR_BUILD/tools/libvamr-preload.so
VA_PARAM=/sys/module/rdma_rxe/parameters/va_mr
PRELOAD_LIB=$VAMR_BUILD/tools/libvamr-preload.so
MODES=${VAMR_PAIR_MODES:-stock va_mr preload}

# mode_available MODE: status 0 if this build can run MODE, else prints why.
mode_available() {
	case "$1" in
	stock) return 0 ;;
	va_mr)
		[ -e "$VA_PARAM" ] && return 0
		echo "rdma_rxe has no va_mr parameter ($VA_PARAM) in this build"
		return 1
		;;
	preload)
		[ -f "$PRELOAD_LIB" ] && return 0
		echo "no preload library $PRELOAD_LIB in this build"
		return 1
		;;
	esac
	echo "unknown mode $1"
	return 1
}

# set_va_mr VALUE: the va_mr parameter on both nodes (when there is one).
# Nothing to do when both are known to be at VALUE already (VA_MR_NOW: set
# when both writes succeeded; set_va_mr runs in node a's main shell): each
# command for node b costs seconds under TCG.
VA_MR_NOW=
set_va_mr() {
	[ -e "$VA_PARAM" ] || return 0
	[ "$VA_MR_NOW" = "$1" ] && return 0
	VA_MR_NOW=
	echo "$1" >"$VA_PARAM" && on_b "echo $1 >$VA_PARAM" && VA_MR_NOW=$1
}

# mode_env MODE: the mpirun -x arguments of MODE.
mode_env() {
	case "$1" in
	preload) echo "-x LD_PRELOAD=$PRELOAD_LIB" ;;
	esac
}

# expect MODE: what the MPI run must show: "wrong" (some iteration received
# wrong bytes) or "right" (every byte of every iteration right).
expect() {
	if [ "$1" = stock ]; then
		[ "${VAMR_PAIR_BREAK:-0}" = 1 ] && echo right || echo wrong
	else
		echo right
	fi
}

GID_INDEX=
pair_link() {
	n=0 fail=0
	t() { # name command...
		n=$((n + 1))
		_t=$1
		shift
		read -r _s _ </proc/uptime
		if _m=$("$@" 2>&1); then
			echo "ok $n $_t # $(awk -v t0="$_s" '{ printf "%.1f", $1 - t0 }' /proc/uptime)s"
		else
			echo "not ok $n $_t # $(echo "$_m" | tr '\n' ' ' | cut -c1-300)"
			fail=1
		fi
	}
	echo "TAP version 13"
	# (eth1: siw's own link, when the patched siw is staged; run-pair.sh)
	if siw_staged; then
		t only_eth0_eth1_and_lo sh -c '[ "$(ls /sys/class/net | sort | tr "\n" " ")" = "eth0 eth1 lo " ]'
	else
		t only_eth0_and_lo sh -c '[ "$(ls /sys/class/net | sort | tr "\n" " ")" = "eth0 lo " ]'
	fi
	t no_default_route sh -c '! ip route show default | grep -q .'
	t no_route_beyond_the_link sh -c '! ip route get 192.0.2.1 >/dev/null 2>&1'
	t ssh_to_node_b sh -c "[ \"\$(ssh -o ConnectTimeout=60 $VAMR_NODE_b hostname)\" = $VAMR_NODE_b ]"
	# One command for node b (each costs seconds under TCG): its host name
	# (the command channel works) and its two GID indexes.
	from_b=$(on_b "echo \$(hostname) \$(roce_v2_link_local_gid_index rxe0) \$(roce_v2_ipv4_gid_index rxe0)")
	t commands_to_node_b test "${from_b%% *}" = "$VAMR_NODE_b"
	gids_b=${from_b#* }
	GID_INDEX=$(roce_v2_link_local_gid_index rxe0)
	v4=$(roce_v2_ipv4_gid_index rxe0)
	echo "# RoCE v2 GIDs: IPv6 link-local at index ${GID_INDEX:-none} on node a, ${gids_b%% *} on node b;" \
		"IPv4-mapped at index ${v4:-none} on node a, ${gids_b##* } on node b"
	t roce_v2_link_local_gid_found test -n "$GID_INDEX"
	t roce_v2_ipv4_gid_found test -n "$v4"
	t same_gid_indexes_on_both_nodes test "$GID_INDEX $v4" = "$gids_b"
	echo "1..$n"
	return $fail
}

# 4 iterations: the first use, then each remap (munmap+mmap, MADV_DONTNEED)
# once, and munmap+mmap again. 1 MiB: rendezvous through UCX's cached
# registrations like any large message; under TCG the link moves about
# 0.5 MB/s, so each MiB more costs every mode seconds per iteration.
MPI_ITERS=${VAMR_MPI_ITERATIONS:-4}
MPI_MIB=${VAMR_MPI_MIB:-1}
# Plugins and components this job cannot use are not loaded: under TCG each
# costs mpirun, orted and the ranks a dlopen (relocations, constructors,
# files read over 9p) and some a discovery. Seen inside the guests
# (strace of mpirun and of orted): hwloc's plugins pull in
# libX11/xcb (hwloc_gl, which then tries to connect to X displays :0 to :9,
# over their unix socket and TCP, twice in mpirun), libxml2 with ICU and
# libstdc++ (hwloc_xml_libxml) and libOpenCL, and hwloc_pci reads
# /usr/share/misc/pci.ids (1.3 MB) for each topology mpirun and orted load;
# mpirun opened 57 MCA components, each rank 50. With the settings below a
# warm mpirun of this job took 19 and 11 s to MPI_Init done where it
# took 31 and 23 s without them (alternated in one boot).
# HWLOC_PLUGINS_BLACKLIST (hwloc 2.x; mpirun's own environment, the ranks'
# through -x, orted's through the launch agent, which ssh starts on node b
# as "env HWLOC_PLUGINS_BLACKLIST=... orted ..."):
#   hwloc_gl          GPUs behind X displays (NV-CONTROL): no X server, no GPU
#   hwloc_opencl      OpenCL devices: none, the job uses no accelerator
#   hwloc_pci         PCI devices and their locality: used by Open MPI only to
#                     map by distance to a device (--map-by dist) and by the
#                     openib/usnic BTLs; this job maps by node and UCX picks
#                     its device from UCX_NET_DEVICES (UCX does not use hwloc)
#   hwloc_xml_libxml  XML through libxml2: hwloc's own XML code reads and
#                     writes the same format (mpirun and orted exchange
#                     topologies as XML), and hwloc falls back to it
# MCA component selections (mpirun passes its --mca settings to orted and
# to the ranks):
#   plm rsh                 the job is launched over ssh; isolated (one node
#                           only) and slurm cannot launch it
#   ras ^slurm,gridengine,simulator   allocations of those resource managers;
#                           the hosts come from --host
#   rmaps round_robin       --map-by node is round_robin's policy; ppr, seq,
#                           rank_file, mindist, resilient map otherwise
#   schizo ^slurm,jsm,flux  command-line personalities of Slurm, LSF and Flux
#   pmix ext3x              Debian's PMIx (the flux component is for Flux)
#   coll ^sm,han,adapt,monitoring,sync,inter   the collectives of
#                           MPI_COMM_WORLD here come from tuned, basic,
#                           libnbc and self (kept); sm needs ranks on one
#                           node, han and adapt have priority 0 in 4.1 (never
#                           selected unless raised), monitoring needs
#                           pml_monitoring_enable, sync coll_sync_barrier_*,
#                           inter an intercommunicator: none of that here
# odls_base_sigkill_timeout 0: mpi_remap exits 3 after MPI_Finalize on
# both ranks when bytes were wrong (the stock mode, every run); mpirun then
# aborts the job (which is what makes it exit 3 too) and, on each node,
# signals the ranks it still counts as running (orte_odls_base_default_
# kill_local_procs): SIGCONT, a pause of this many seconds (default 1),
# SIGTERM, another pause, SIGKILL. The ranks have finished by then (both
# passed MPI_Finalize, after every line of output); the pauses (2 s in
# mpirun, strace of the stock run) only delayed the end.
MPI_HWLOC_SKIP=hwloc_gl,hwloc_opencl,hwloc_pci,hwloc_xml_libxml
mpi_run() { # mode: runs mpi_remap, prints its output
	# shellcheck disable=SC2046 # mode_env is a word list
	HWLOC_PLUGINS_BLACKLIST=$MPI_HWLOC_SKIP \
		timeout 600 mpirun --allow-run-as-root -np 2 --host "$VAMR_NODE_a:1,$VAMR_NODE_b:1" --map-by node \
		--mca plm_rsh_agent ssh --mca plm_rsh_no_tree_spawn 1 \
		--mca orte_launch_agent "env HWLOC_PLUGINS_BLACKLIST=$MPI_HWLOC_SKIP orted" \
		--mca oob_tcp_if_include eth0 --mca btl self,tcp --mca btl_tcp_if_include eth0 \
		--mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any --mca osc ^ucx \
		--mca plm rsh --mca ras ^slurm,gridengine,simulator --mca rmaps round_robin \
		--mca schizo ^slurm,jsm,flux --mca pmix ext3x --mca coll ^sm,han,adapt,monitoring,sync,inter \
		--mca odls_base_sigkill_timeout 0 \
		-x HWLOC_PLUGINS_BLACKLIST \
		-x UCX_NET_DEVICES=rxe0:1 -x UCX_IB_GID_INDEX="$GID_INDEX" -x UCX_TLS=rc_verbs,ud_verbs,self \
		-x UCX_WARN_UNUSED_ENV_VARS=n $(mode_env "$1") \
		"$VAMR_BUILD/mpi/mpi_remap" "$MPI_ITERS" "$MPI_MIB"
}

mpi_remap() {
	n=0 fail=0
	echo "TAP version 13"
	[ -n "$GID_INDEX" ] || GID_INDEX=$(roce_v2_link_local_gid_index rxe0)
	echo "# UCX_IB_GID_INDEX=$GID_INDEX (RoCE v2, IPv6 link-local, from rxe0's GID table)"
	stock_reg=""
	for mode in $MODES; do
		if ! why=$(mode_available "$mode"); then
			n=$((n + 1))
			echo "ok $n $mode.ran # SKIP $why"
			echo "# vamr-mpi $mode - - - - - not-available"
			continue
		fi
		set_va_mr "$([ "$mode" = va_mr ] && echo 1 || echo 0)"
		t0=$(date +%s)
		rc=0
		# Each line of mpirun's output with the uptime when it came (read by
		# the shell: awk reads its input in blocks and would stamp them all
		# at the end).
		read -r up0 _ </proc/uptime
		{ mpi_run "$mode" 2>&1 || echo "mpirun-status $?"; } | while IFS= read -r line; do
			read -r up _ </proc/uptime
			printf '%s %s\n' "$up" "$line"
		done >/tmp/mpi_$mode.ts
		secs=$(($(date +%s) - t0))
		set_va_mr 0
		sed 's/^ *[0-9.]* //' /tmp/mpi_$mode.ts | grep -v '^mpirun-status ' >/tmp/mpi_$mode.out
		st=$(sed -n 's/^ *[0-9.]* mpirun-status //p' /tmp/mpi_$mode.ts)
		[ -z "$st" ] || rc=$st
		sed "s/^/# $mode: /" /tmp/mpi_$mode.out
		# Where the time went: rank 0's first line (MPI_Init done on both
		# nodes; the preload library prints before it), the last iteration,
		# the end.
		echo "# $mode: timing: MPI_Init done at $(awk -v t0="$up0" '$2 == "mpi_remap:" { printf "%.1f", $1 - t0; exit }' /tmp/mpi_$mode.ts)s," \
			"last iteration at $(awk -v t0="$up0" '/ iteration [0-9]+ / { t = $1 - t0 } END { printf "%.1f", t }' /tmp/mpi_$mode.ts)s," \
			"mpirun ended after ${secs}s"
		sum=$(grep '^mpi_remap: iterations' /tmp/mpi_$mode.out | tail -n1)
		n=$((n + 1))
		# mpi_remap exits 3 when bytes were wrong; mpirun passes it on.
		if [ -n "$sum" ] && { [ "$rc" = 0 ] || [ "$rc" = 3 ]; }; then
			echo "ok $n $mode.ran # ${secs}s"
		else
			echo "not ok $n $mode.ran # mpirun exit status $rc"
			fail=1
			echo "# vamr-mpi $mode - - - - - failed"
			continue
		fi
		# iterations N wrong_iterations W wrong_bytes B reg R0/R1 dereg D0/D1
		set -- $sum
		iters=$3 wrong_it=$5 wrong_b=$7 reg=$9
		echo "# vamr-mpi $mode $iters $wrong_it $wrong_b $reg ${secs}s ok"
		n=$((n + 1))
		want=$(expect "$mode")
		got=right
		[ "$wrong_it" = 0 ] || got=wrong
		if [ "$got" = "$want" ]; then
			echo "ok $n $mode.bytes_$want # $wrong_it of $iters iteration(s) wrong, $wrong_b byte(s)"
		else
			echo "not ok $n $mode.bytes_$want # $wrong_it of $iters iteration(s) wrong, $wrong_b byte(s)"
			fail=1
		fi
		if [ "$mode" = stock ]; then
			stock_reg=$reg
		elif [ -n "$stock_reg" ]; then
			# VA MRs keep the cache hitting: no more registrations than stock.
			n=$((n + 1))
			if [ "$reg" = "$stock_reg" ]; then
				echo "ok $n $mode.same_registrations_as_stock # $reg (rank 0/rank 1)"
			else
				echo "not ok $n $mode.same_registrations_as_stock # $reg, stock $stock_reg"
				fail=1
			fi
		fi
	done
	echo "1..$n"
	return $fail
}

rping_test() {
	echo "TAP version 13"
	# (rping's default port: 7174)
	on_b "timeout 120 rping -s -a $VAMR_IP_b -C 10 -S 4096 >/tmp/rping_s.out 2>&1 </dev/null &
		cm_listening 7174"
	rc=0
	timeout 120 rping -c -a "$VAMR_IP_b" -C 10 -S 4096 -V >/tmp/rping_c.out 2>&1 || rc=$?
	sed 's/^/# /' /tmp/rping_c.out | cut -c1-200 | tail -n 5
	if [ "$rc" = 0 ]; then
		echo "ok 1 rping_10x4KiB_validated"
	else
		echo "not ok 1 rping_10x4KiB_validated # exit status $rc"
	fi
	echo "1..1"
	return $rc
}

# ib_write_bw's iterations: it must complete over rdma_cm; under TCG the link
# moves about 0.5 MB/s, so each 64 KiB iteration costs about 0.1 s.
PERF_ITERS=${VAMR_PERF_ITERATIONS:-25}
perftest_test() {
	echo "TAP version 13"
	echo "# ib_write_bw -R (rdma_cm), $PERF_ITERS iterations of 64 KiB; bandwidth under TCG is not a measurement"
	# (perftest's default port: 18515)
	on_b "timeout 180 ib_write_bw -R -d rxe0 -n $PERF_ITERS -s 65536 >/tmp/bw_s.out 2>&1 </dev/null &
		cm_listening 18515"
	rc=0
	timeout 180 ib_write_bw -R -d rxe0 -n "$PERF_ITERS" -s 65536 "$VAMR_IP_b" >/tmp/bw_c.out 2>&1 || rc=$?
	sed 's/^/# /' /tmp/bw_c.out | tail -n 6
	if [ "$rc" = 0 ] && grep -q "^ 65536 *$PERF_ITERS " /tmp/bw_c.out; then
		echo "ok 1 ib_write_bw_rdma_cm_completes"
	else
		echo "not ok 1 ib_write_bw_rdma_cm_completes # exit status $rc"
		rc=1
	fi
	echo "1..1"
	return $rc
}

# rdma_remote per MR mode: the server (node b) registers normal MRs, except
# in mode "va", where it asks for VAMR_ACCESS_VA itself; va_mr and preload
# turn its normal MRs into VA MRs.
REMOTE_MODES=${VAMR_REMOTE_MODES:-stock va_mr preload va}

# remote_run NAME COLUMN DEVICE IP PORT WANT SERVER-ARG [ENV]: one
# rdma_remote run, server on node b (SERVER-ARG: "va" or empty; ENV: its
# environment, e.g. the preload library), client on node a connecting to node
# b's address IP, checking against WANT (normal | va) and printing
# "# vamr-remote ... COLUMN ..." lines; TAP results NAME.<scenario>.<op> and
# NAME.device_DEVICE (IP's netdev picks the RDMA device: eth0's rxe0, eth1's
# siw0), numbered on from n, fail=1 on a failure.
remote_run() {
	rr_name=$1 rr_col=$2 rr_dev=$3 rr_ip=$4 rr_port=$5 rr_want=$6 rr_arg=$7 rr_env=${8:-}
	# The server's output goes to the run directory, where node a reads it.
	on_b "$rr_env timeout 300 $VAMR_BUILD/pair/rdma_remote server $rr_arg $rr_port \
			>$VAMR_RUN/out/rdma_remote_$rr_col.out 2>&1 </dev/null &
		cm_listening $rr_port"
	rc=0
	timeout 300 "$VAMR_BUILD/pair/rdma_remote" client "$rr_ip" "$rr_col" "$rr_want" "$rr_port" \
		>/tmp/rdma_remote_c.out 2>&1 || rc=$?
	sed "s/^/# $rr_col server: /" "$VAMR_RUN/out/rdma_remote_$rr_col.out"
	grep -v -e '^pass ' -e '^fail ' /tmp/rdma_remote_c.out | sed '/^# vamr-remote/!s/^/# /'
	got=0 dev=
	while read -r res name rest; do
		case "$res" in
		device) dev=$name ;;
		pass) n=$((n + 1)); got=$((got + 1)); echo "ok $n $rr_name.$name" ;;
		fail) n=$((n + 1)); got=$((got + 1)); echo "not ok $n $rr_name.$name $rest"; fail=1 ;;
		esac
	done </tmp/rdma_remote_c.out
	if [ -n "$dev" ]; then
		n=$((n + 1))
		if [ "$dev" = "$rr_dev" ]; then
			echo "ok $n $rr_name.device_$rr_dev"
		else
			echo "not ok $n $rr_name.device_$rr_dev # rdma_cm picked $dev for $rr_ip"
			fail=1
		fi
	fi
	if [ "$got" = 0 ] || { [ "$rc" != 0 ] && [ "$rc" != 1 ]; }; then
		n=$((n + 1))
		why="exit status $rc"
		[ "$rc" = 3 ] && why="teardown stuck: $(grep -m1 -o 'stuck in [^;]*' /tmp/rdma_remote_c.out)"
		echo "not ok $n $rr_name.client_ran # $why"
		fail=1
	fi
}

# remote_want MODE: what the client checks against: normal (pinned-MR
# semantics) for stock MRs, va otherwise; VAMR_PAIR_BREAK=1 inverts stock's.
remote_want() {
	if [ "$1" = stock ] && [ "${VAMR_PAIR_BREAK:-0}" != 1 ]; then
		echo normal
	else
		echo va
	fi
}

rdma_remote_test() {
	n=0 fail=0 port=7471
	echo "TAP version 13"
	for mode in $REMOTE_MODES; do
		port=$((port + 1))
		if [ "$mode" != va ] && ! why=$(mode_available "$mode"); then
			n=$((n + 1))
			echo "ok $n $mode # SKIP $why"
			continue
		fi
		set_va_mr "$([ "$mode" = va_mr ] && echo 1 || echo 0)"
		env="" arg=""
		[ "$mode" = preload ] && env="LD_PRELOAD=$PRELOAD_LIB"
		[ "$mode" = va ] && arg=va
		remote_run "$mode" "$mode" rxe0 "$VAMR_IP_b" "$port" "$(remote_want "$mode")" "$arg" "$env"
		set_va_mr 0
	done
	echo "1..$n"
	return $fail
}

# rdma_remote over soft-iWARP (section rdma_remote_siw; runs with
# rdma_remote when the patched siw is staged): the same program, client and
# server on siw0, which node-init binds to eth1 (siw's own link, run-pair.sh),
# by connecting to node b's address there. Modes: normal (stock MRs; siw has
# no va_mr parameter) and va (the server asks for VAMR_ACCESS_VA); columns
# siw-normal and siw-va of the cross-node table.
SIW_REMOTE_MODES=${VAMR_SIW_REMOTE_MODES:-normal va}
rdma_remote_siw_test() {
	n=0 fail=0 port=7481
	echo "TAP version 13"
	set_va_mr 0
	for mode in $SIW_REMOTE_MODES; do
		port=$((port + 1))
		arg="" want=$(remote_want stock)
		[ "$mode" = va ] && arg=va want=va
		remote_run "$mode" "siw-$mode" siw0 "$VAMR_SIW_IP_b" "$port" "$want" "$arg"
	done
	echo "1..$n"
	return $fail
}

# vamr_global, vamr_bytes, vamr_regions, no_local_va_regions:
# scripts/guest/node-lib.sh (node b's commands use them too).

# reap_b: ends what a section left running in the background on node b (its
# servers run under timeout, up to 300 s) and waits up to 10 s for it to go,
# so that no earlier program holds MRs or moves bytes during the next
# section. Says which programs it had to end.
reap_b() {
	on_b "reap rdma_remote rping ib_write_bw fi_pingpong mpi_remap"
}

# libfabric: fi_pingpong of Debian's libfabric-bin over the verbs provider
# (FI_EP_MSG, rdma_cm), server on node b, once per MR mode, every received
# message checked (-c). libfabric registers its buffers with ibv_reg_mr, so
# va_mr and the preload library turn them into VA MRs: the bytes rxe moves
# through vamr (vamrctl stats --global) grow on both nodes then, and stay
# where they were with stock MRs.
# 5 messages each way: under TCG each 64 KiB round trip takes about 0.25 s.
FABRIC_ITERS=${VAMR_FABRIC_ITERATIONS:-5}
FABRIC_SIZE=65536
libfabric_test() {
	n=0 fail=0 port=47700
	echo "TAP version 13"
	echo "# fi_pingpong -p verbs -e msg -d rxe0 -I $FABRIC_ITERS -S $FABRIC_SIZE -c (libfabric $(fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p'))"
	for mode in $MODES; do
		port=$((port + 1))
		if ! why=$(mode_available "$mode"); then
			n=$((n + 1))
			echo "ok $n $mode.ran # SKIP $why"
			continue
		fi
		set_va_mr "$([ "$mode" = va_mr ] && echo 1 || echo 0)"
		env=""
		[ "$mode" = preload ] && env="LD_PRELOAD=$PRELOAD_LIB"
		# Neither node has a live VA region when the byte counters are read
		# (so that they move only for fi_pingpong); node b's wait, its
		# counters and its server in one command for node b.
		no_local_va_regions
		a0=$(vamr_bytes)
		out_b=$(on_b "no_local_va_regions
			echo bytes \$(vamr_bytes)
			$env timeout 120 fi_pingpong -p verbs -e msg -d rxe0 -I $FABRIC_ITERS -S $FABRIC_SIZE -c -B $port \
				>$VAMR_RUN/out/fi_s_$mode.out 2>&1 </dev/null &
			tcp_listening $port")
		echo "$out_b" | grep '^#'
		b0=$(echo "$out_b" | awk '$1 == "bytes" { print $2 }')
		rc=0
		env $env timeout 120 fi_pingpong -p verbs -e msg -d rxe0 -I "$FABRIC_ITERS" -S "$FABRIC_SIZE" -c \
			-P "$port" "$VAMR_IP_b" >/tmp/fi_c_$mode.out 2>&1 || rc=$?
		a1=$(vamr_bytes)
		# Node b's counters once its server has ended (10 s at most).
		out_b=$(on_b "i=0
			while pgrep -x fi_pingpong >/dev/null && [ \$i -lt 50 ]; do sleep 0.2; i=\$((i + 1)); done
			echo bytes \$(vamr_bytes)")
		b1=$(echo "$out_b" | awk '$1 == "bytes" { print $2 }')
		set_va_mr 0
		sed "s/^/# $mode client: /" /tmp/fi_c_$mode.out | tail -n 4
		sed "s/^/# $mode server: /" "$VAMR_RUN/out/fi_s_$mode.out" | tail -n 4
		n=$((n + 1))
		if [ "$rc" = 0 ]; then
			echo "ok $n $mode.pingpong_data_checked"
		else
			echo "not ok $n $mode.pingpong_data_checked # fi_pingpong exit status $rc"
			fail=1
		fi
		# Each side received FABRIC_ITERS messages of FABRIC_SIZE bytes.
		want=$((FABRIC_ITERS * FABRIC_SIZE))
		da=unknown db=unknown
		case "$a0$a1$b0$b1" in
		*unknown*) ;;
		*) [ -n "$a0" ] && [ -n "$a1" ] && [ -n "$b0" ] && [ -n "$b1" ] && da=$((a1 - a0)) db=$((b1 - b0)) ;;
		esac
		echo "# vamr-fabric $mode node_a $da node_b $db"
		expect_va=1
		[ "$mode" = stock ] && expect_va=0
		[ "$mode" = stock ] && [ "${VAMR_PAIR_BREAK:-0}" = 1 ] && expect_va=1
		n=$((n + 1))
		if [ "$da" = unknown ]; then
			echo "not ok $n $mode.vamr_counters # vamrctl stats --global failed"
			fail=1
		elif [ "$expect_va" = 1 ] && [ "$da" -ge "$want" ] && [ "$db" -ge "$want" ]; then
			echo "ok $n $mode.bytes_through_va_mrs # $da on node a, $db on node b"
		elif [ "$expect_va" = 0 ] && [ "$da" = 0 ] && [ "$db" = 0 ]; then
			echo "ok $n $mode.no_bytes_through_va_mrs"
		else
			echo "not ok $n $mode.$([ "$expect_va" = 1 ] && echo bytes_through_va_mrs || echo no_bytes_through_va_mrs)" \
				"# $da on node a, $db on node b (each received $want)"
			fail=1
			# Who else had MRs: the processes and MRs of both nodes now.
			rdma res show mr 2>&1 | sed 's/^/# node a now: /'
			on_b "rdma res show mr; ps -eo pid,etimes,args | grep -v -e ' \\[' -e 'ps -eo'" 2>&1 |
				sed 's/^/# node b now: /'
		fi
		if [ "$mode" = preload ]; then
			n=$((n + 1))
			if grep -q '^vamr-preload: rxe0: MRs get virtual-address semantics' /tmp/fi_c_$mode.out; then
				echo "ok $n preload.library_active"
			else
				echo "not ok $n preload.library_active # no vamr-preload line on the client's stderr"
				fail=1
			fi
		fi
	done
	echo "1..$n"
	return $fail
}

run_tap demo gid_table_a gid_table rxe0
if wait_flag ready_b 600; then
	# One ssh connection to node b for the whole run (ControlMaster of
	# node-init's ssh configuration): the ssh sessions of pair_link and of
	# mpirun go through it instead of logging in each time.
	ssh -fN -o ControlMaster=yes "$VAMR_NODE_b" </dev/null >/dev/null 2>&1 ||
		out "# node a: no ssh master connection to $VAMR_NODE_b (each ssh logs in)"
	for t in ${VAMR_PAIR_TESTS:-pair_link mpi_remap rdma_remote rping perftest libfabric}; do
		case "$t" in
		pair_link) run_tap tap pair_link pair_link ;;
		mpi_remap) run_tap tap mpi_remap mpi_remap ;;
		rdma_remote)
			run_tap tap rdma_remote rdma_remote_test
			# The same over soft-iWARP, when the patched siw is staged
			# (collect-results.py expects the section then).
			if siw_staged; then
				reap_b >&3 2>&1
				run_tap tap rdma_remote_siw rdma_remote_siw_test
			fi
			;;
		rping) run_tap tap rping rping_test ;;
		perftest) run_tap tap perftest perftest_test ;;
		libfabric) run_tap tap libfabric libfabric_test ;;
		esac
		reap_b >&3 2>&1
	done
else
	out "# node a: node b never got ready"
fi
flag done_a

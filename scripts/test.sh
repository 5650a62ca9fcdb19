#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Run every test: build what is needed (scripts/prepare.sh), boot the test
# kernel under QEMU, run the KUnit suites (at vamr.ko load) and the
# kselftest-style programs in the guest, and print one line per test and
#   N passed, N failed, N skipped
# Exit status 0 only when everything passed and the kernel log is clean.
# At the same time as the build (VAMR_SERIAL=1: after it, one after the
# other), the host-side packaging checks (scripts/host-checks.sh: dkms build
# and install against the test kernel tree, make install, all into scratch
# directories) run; their results are the section "host" (host.*). Logs:
# build/logs/test/{console,results,qemu,host-checks}.log, and times (what
# each part took). Also at the same time, the two-node tests
# (scripts/run-pair.sh, tests/pair/node-a.sh and node-b.sh;
# Documentation/two-nodes.rst): section "two-node" (pair.*), logs in
# build/logs/pair/{a,b}/. VAMR_PAIR_TESTS selects their sections (default: all),
# VAMR_PAIR_BREAK=1 inverts the stock-MR expectation (the run must fail).
# VAMR_FUZZ_SECONDS: how long rdma_fuzz runs in the one-node guest (its
# default: 10 s; a long run: scripts/soak.sh). After the one-node guest, the
# mirror guest (scripts/run-mirror.sh: QEMU's edu device behind intel-iommu,
# tests/mirror): section "mirror" (mirror.*), logs in build/logs/mirror/;
# VAMR_MIRROR=0 leaves it out.
#
# usage: test.sh [--sanitize]
#   --sanitize  the sanitizer run instead (Documentation/build-and-test.rst):
#     the same suite on the sanitizer kernel (build-kernel.sh --sanitize:
#     KASAN, UBSAN, kmemleak, fault injection; built with LLVM, 20-40 min the
#     first time), then a fault-injection phase over $VAMR_FAULT_PROGRAMS
#     (default below) in which every $VAMR_FAULT_INTERVAL-th (default 7)
#     allocation or user copy made from vamr.ko's code fails, then kmemleak
#     scans. Logs: build/logs/sanitize/. VAMR_TIMEOUT defaults to 3600 s there.
#     VAMR_SANITIZE_PROGRAMS="prog ..." runs only those programs of
#     tests/selftests (and of them the fault-injection ones).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

sanitize=0
for arg in "$@"; do
	case "$arg" in
	--sanitize) sanitize=1 ;;
	*) die "usage: test.sh [--sanitize]" ;;
	esac
done

if [ "$sanitize" = 0 ]; then
	# The kernel first: the host checks need only it and the sources (they
	# build their own copy), so they run while prepare.sh builds the rest.
	kdir=$("$here/prepare.sh" --kernel)
	logdir="$VAMR_BUILD/logs/test"
	pairlog="$VAMR_BUILD/logs/pair"
	mkdir -p "$logdir"
	rm -f "$logdir/times" "$logdir/host.tap"
	# The two-node tests (tests/pair/node-a.sh): two guests on the host's
	# user space, a private link, Open MPI/UCX, rdma_remote, rping, perftest.
	pair_tests=${VAMR_PAIR_TESTS:-movable pair_link mpi_remap rdma_remote rping perftest libfabric}
	# The host checks start with the build of the modules and the tests
	# (prepare.sh), then the pair and the one-node guest run at the same time
	# as whatever is left of them: under TCG the one-node guest keeps about
	# one core busy on average (2 vCPUs, but its tests run one after the
	# other), each node about half of one, so on 2 cores they overlap well.
	# VAMR_SERIAL=1, or less than 6 GiB of available memory (the guests take
	# 2 + 2 x 1.5 GiB), runs them one after the other.
	serial=${VAMR_SERIAL:-0}
	avail_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	if [ "$serial" != 1 ] && [ "${avail_kib:-0}" -lt $((6 * 1024 * 1024)) ]; then
		log "less than 6 GiB of memory available: the guests run one after the other"
		serial=1
	fi
	# Host-side checks (packaging: dkms, make install): a TAP section "host",
	# added to the guest's results so that the collector counts it too.
	host_checks() {
		local t=$SECONDS
		log "host checks (dkms build, make install): $logdir/host-checks.log"
		"$here/host-checks.sh" "$kdir" "$logdir/host.tap" ||
			[ -s "$logdir/host.tap" ] || printf '### BEGIN tap host\n### END tap host rc=1\n' >"$logdir/host.tap"
		echo "host checks $((SECONDS - t))s" >>"$logdir/times"
	}
	pair() {
		local t=$SECONDS rc=0
		VAMR_PAIR_TESTS=$pair_tests VAMR_TIMEOUT=${VAMR_PAIR_TIMEOUT:-1200} \
			"$here/run-pair.sh" "$kdir" "$pairlog" \
			". $top/tests/pair/node-a.sh" ". $top/tests/pair/node-b.sh" || rc=$?
		echo "two nodes $((SECONDS - t))s" >>"$logdir/times"
		return "$rc"
	}
	one_node() {
		local t=$SECONDS rc=0
		VAMR_KERNEL_ARGS="${VAMR_KERNEL_ARGS:-}${VAMR_FUZZ_SECONDS:+ vamr_fuzz_seconds=$VAMR_FUZZ_SECONDS}" \
			"$here/run-guest.sh" "$kdir" test "$VAMR_BUILD/selftests" "$logdir" || rc=$?
		echo "one-node guest $((SECONDS - t))s" >>"$logdir/times"
		return "$rc"
	}
	# Section "mirror": the mirror API on a DMA device behind an IOMMU, a
	# guest of its own (q35, intel-iommu, edu), summarized into
	# $mirrorlog/summary.txt like the distro section.
	mirrorlog="$VAMR_BUILD/logs/mirror"
	mirror_section() {
		local t=$SECONDS rc=0
		[ "${VAMR_MIRROR:-1}" = 1 ] || return 0
		rm -rf "$mirrorlog"
		"$here/run-mirror.sh" "$kdir" "$mirrorlog" || rc=$?
		{
			echo "== the mirror API on QEMU's edu device ($(grep -q 'vamr_mirror_iommu=1' \
				"$mirrorlog/console.log" 2>/dev/null && echo intel-iommu || echo no IOMMU)," \
				"$(cat "$mirrorlog/accel" 2>/dev/null))"
			"$here/collect-results.py" "$mirrorlog" --guest-rc "$rc" --kconfig "$kdir/.config" \
				--tests "$(make -s -C "$top/tests/mirror" list)" || true
		} >"$mirrorlog/summary.txt"
		echo "mirror guest $((SECONDS - t))s" >>"$logdir/times"
	}
	# Section "distro": Debian's stock kernel, unmodified (prepare.sh --distro,
	# scripts/distro.sh), after the rest: the VA-semantics programs in one
	# guest (with the module unload), the cross-node table and the MPI job on
	# two; summarized into $distrolog/summary.txt, counted as distro.*.
	# VAMR_DISTRO=0 leaves it out.
	distrolog="$VAMR_BUILD/logs/distro"
	# (va_mr_jobs.sh runs the unmodified va_mr_remap of helpers/ with va_mr=1 and
	# LD_PRELOAD.)
	distro_progs="rdma_va va_mr_jobs.sh rdma_monitor vamr_monitor"
	distro_pair_tests="pair_link mpi_remap rdma_remote"
	distro_section() {
		local t=$SECONDS dk rc=0 prc=0 p
		[ "${VAMR_DISTRO:-1}" = 1 ] || return 0
		rm -rf "$distrolog"
		mkdir -p "$distrolog/progs"
		log "distro section (Debian's stock kernel): $distrolog"
		if ! dk=$("$here/prepare.sh" --distro 2>"$distrolog/prepare.log"); then
			tail -n 20 "$distrolog/prepare.log" >&2
			echo "FAIL  setup.prepare_distro  # prepare.sh --distro failed: $distrolog/prepare.log" >"$distrolog/summary.txt"
			return 0
		fi
		for p in $distro_progs helpers; do
			ln -s "$VAMR_BUILD/selftests/$p" "$distrolog/progs/$p"
		done
		"$here/run-guest.sh" "$dk" test "$distrolog/progs" "$distrolog/one" || rc=$?
		VAMR_PAIR_TESTS=$distro_pair_tests VAMR_TIMEOUT=${VAMR_PAIR_TIMEOUT:-1200} \
			"$here/run-pair.sh" "$dk" "$distrolog/pair" \
			". $top/tests/pair/node-a.sh" ". $top/tests/pair/node-b.sh" || prc=$?
		{
			echo "== Debian's stock kernel: the guests ran" \
				"$(sed -n 's/.*Linux version \([^ ]*\) .*/\1/p' "$distrolog/one/console.log" | head -n1)"
			"$here/collect-results.py" "$distrolog/one" --guest-rc "$rc" --kconfig "$dk/.config" \
				--tests "$distro_progs" --pair "$distrolog/pair" --pair-tests "$distro_pair_tests" \
				--pair-rc "$prc" || true
		} >"$distrolog/summary.txt"
		echo "distro section $((SECONDS - t))s" >>"$logdir/times"
	}
	guest_rc=0 pair_rc=0
	if [ "$serial" = 1 ]; then
		VAMR_KDIR=$kdir "$here/prepare.sh" >/dev/null
		t_prepare=$SECONDS
		host_checks
		one_node || guest_rc=$?
		mirror_section
		pair || pair_rc=$?
	else
		host_checks &
		host_pid=$!
		# Stop the host checks if the build fails (set -e leaves here).
		trap 'kill "$host_pid" 2>/dev/null || true' EXIT
		VAMR_KDIR=$kdir "$here/prepare.sh" >/dev/null
		t_prepare=$SECONDS
		pair &
		pair_pid=$!
		one_node || guest_rc=$?
		mirror_section
		wait "$pair_pid" || pair_rc=$?
		wait "$host_pid" || true
		trap - EXIT
	fi
	[ "$guest_rc" = 0 ] || log "guest run ended with status $guest_rc; see $logdir/console.log"
	cat "$logdir/host.tap" >>"$logdir/results.log"
	distro_section
	log "times: prepare ${t_prepare}s, $(paste -sd, "$logdir/times" | sed 's/,/, /g')" \
		"($([ "$serial" = 1 ] && echo "one after the other" || echo "at the same time")), total $SECONDS s"
	# Expected sections: the selftests' programs, shell tests (TEST_PROGS)
	# included, the host checks, and the two-node sections.
	tests="$(make -s -C "$top/tests/selftests" list) host"
	exec "$here/collect-results.py" "$logdir" --guest-rc "$guest_rc" --kconfig "$kdir/.config" \
		--tests "$tests" --pair "$pairlog" --pair-tests "$pair_tests" --pair-rc "$pair_rc" \
		$([ "${VAMR_MIRROR:-1}" = 1 ] && echo "--also mirror=$mirrorlog/summary.txt") \
		$([ "${VAMR_DISTRO:-1}" = 1 ] && echo "--also distro=$distrolog/summary.txt")
fi

# The sanitizer run.
t0=$SECONDS
kdir=$("$here/prepare.sh" --sanitize)
t_build=$((SECONDS - t0))
logdir="$VAMR_BUILD/logs/sanitize"
conf="$VAMR_BUILD/sanitize.conf"
mkdir -p "$VAMR_BUILD"
fault_programs=${VAMR_FAULT_PROGRAMS:-vamr_query vamr_region vamr_events vamr_limits vamr_api rdma_va}
# vamr.ko's executable sections (name, size) for the fault-injection address
# filter; the guest adds their load addresses from /sys/module/vamr/sections.
sections=""
while read -r name _type _addr _off size _es flags _rest; do
	case "$flags" in *X*) ;; *) continue ;; esac
	case "$name" in .init*) continue ;; esac
	sections="$sections$name $((16#$size)) "
done < <(readelf -SW "$top/vamr.ko" | sed -n 's/^ *\[ *[0-9]*\] //p')
[ -n "$sections" ] || die "no executable section found in $top/vamr.ko"
{
	echo "# Written by scripts/test.sh --sanitize; read by the guest's init (scripts/guest/init)."
	echo "FAULT_MODULE=vamr"
	echo "FAULT_TEXT_SECTIONS=\"${sections% }\""
	echo "FAULT_PROGRAMS=\"$fault_programs\""
	echo "FAULT_INTERVAL=${VAMR_FAULT_INTERVAL:-7}"
	echo "FAULT_TIMES=1000000"
} >"$conf"
# The programs: all of tests/selftests, or a directory of links to the chosen ones.
progdir="$VAMR_BUILD/selftests"
san_tests=$(make -s -C "$top/tests/selftests" list)
if [ -n "${VAMR_SANITIZE_PROGRAMS:-}" ]; then
	progdir="$VAMR_BUILD/sanitize-programs"
	rm -rf "$progdir"
	mkdir -p "$progdir"
	ln -s "$VAMR_BUILD/selftests/helpers" "$progdir/helpers"
	for p in $VAMR_SANITIZE_PROGRAMS; do
		[ -x "$VAMR_BUILD/selftests/$p" ] || die "VAMR_SANITIZE_PROGRAMS: no program $p in $VAMR_BUILD/selftests"
		ln -s "$VAMR_BUILD/selftests/$p" "$progdir/$p"
	done
	san_tests=$VAMR_SANITIZE_PROGRAMS
	fault_programs=$(for p in $fault_programs; do
		case " $VAMR_SANITIZE_PROGRAMS " in *" $p "*) echo "$p" ;; esac
	done | paste -sd' ')
	sed -i "s/^FAULT_PROGRAMS=.*/FAULT_PROGRAMS=\"$fault_programs\"/" "$conf"
fi
t1=$SECONDS
guest_rc=0
# kasan_multi_shot: every KASAN report, not only the first one.
VAMR_TIMEOUT=${VAMR_TIMEOUT:-3600} VAMR_KERNEL_ARGS="kasan_multi_shot" VAMR_GUEST_CONF="$conf" \
	"$here/run-guest.sh" "$kdir" test "$progdir" "$logdir" || guest_rc=$?
t_guest=$((SECONDS - t1))
[ "$guest_rc" = 0 ] || log "guest run ended with status $guest_rc; see $logdir/console.log"
rc=0
"$here/collect-results.py" "$logdir" --guest-rc "$guest_rc" --kconfig "$kdir/.config" \
	--faultinj "$fault_programs" --tests "$san_tests" || rc=$?
log "sanitizer run: build ${t_build}s (kernel, modules, tests), guest ${t_guest}s ($(cat "$logdir/accel" 2>/dev/null))"
exit "$rc"

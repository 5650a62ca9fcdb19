#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turn the guest's logs into one result per test and a closing count.

usage: collect-results.py LOGDIR|- [--guest-rc N] [--kconfig FILE] [--tests NAME,...]
                          [--faultinj NAME,...]
                          [--pair DIR --pair-tests NAME,... [--pair-rc N]]
  --guest-rc N   exit status of scripts/run-guest.sh: anything but 0 (124 =
                 watchdog timeout, also after the end marker) fails the run
  --kconfig FILE the guest kernel's .config: KASAN, UBSAN and kmemleak reports
                 are looked for (and reported) only when the kernel has them
  --tests LIST   the selftest programs that were put into the image (default:
                 every program of TEST_GEN_PROGS in tests/selftests/Makefile)
  --faultinj LIST the programs of the fault-injection phase (sanitizer run)

Reads LOGDIR/results.log (TAP and KTAP sections written by the guest's /init,
see scripts/guest/init) and LOGDIR/console.log (the kernel console).

Prints one line per test ("PASS|FAIL|SKIP  section.test"), the kernel
problems found in the console log, then the counts of vamr's own tests, of the
baseline (normal and ODP MRs, the stock rxe) and of the guest set-up steps and
run checks, and last, over everything, the line
    N passed, N failed, N skipped
Exit status: 0 only when no test failed, every section ended with rc=0, the
guest reached its end marker and exited normally, and the console shows no
oops, panic, BUG, WARN, lockdep report or hung task.

Expected sections: a tap section per selftest program (the Makefile's list),
guest_setup, a kunit section per KUnit suite (KUNIT_SUITES and every
#[kunit_tests(...)] in src/ and its subdirectories), and in a sanitizer run kmemleak_loaded and
kmemleak_unloaded (kernel with kmemleak) and a faultinj section per program of
--faultinj. A missing expected section, an unexpected one (a stale program in
the image), a section without a TAP plan, or a plan ("1..N", at every KTAP
level) that does not match the number of results fails the run.

Two-node run (--pair DIR, scripts/run-pair.sh with tests/pair/node-a.sh and
node-b.sh): DIR/a and DIR/b hold each node's results.log and console.log.
Expected there: the TAP sections setup_a and setup_b (each node's set-up
steps) and, in node a's log, one TAP section per name of --pair-tests. They
are checked like the guest's (plans, rc, missing or unexpected sections, end
marker of both nodes, --pair-rc, clean kernel logs on both) and counted under
"two-node"; with rdma_remote also rdma_remote_siw (rdma_remote over
soft-iWARP), when the patched siw was staged (DIR/run/modroot/.../updates/
siw.ko). "# vamr-mpi" and "# vamr-remote" lines become the MPI table and the
cross-node remap table (siw's as columns siw-normal and siw-va),
"# vamr-fabric" lines the libfabric table. LOGDIR "-" checks the two-node
run only.

Sanitizer run (scripts/test.sh --sanitize): KASAN and UBSAN reports and
kmemleak's unreferenced objects in the console are problems like the above.
Sections of kind "faultinj" ran under fault injection: their failing tests are
expected (injected ENOMEM/EFAULT) and listed as INJ, not counted; such a
section still fails the run when it is cut off or its program was killed by a
signal. Between the guest's "vamr-phase: faultinj" and "vamr-phase:
faultinj-done" console markers, the stack dumps of the kernel's own reports
of a failed allocation ("page allocation failure", "vmalloc error") are
expected too; anything else (WARN, BUG, KASAN, UBSAN, lockdep, ...) is not.
"""
import argparse
import glob
import os
import re
import sys

# Kernel console lines that mean the run is broken, whatever the tests said.
KERNEL_PROBLEMS = [
    r"BUG: ",
    r"WARNING: ",
    r"Oops",
    r"Kernel panic",
    r"general protection fault",
    r"possible circular locking dependency",
    r"possible recursive locking",
    r"inconsistent lock state",
    r"suspicious RCU usage",
    r"INFO: task .* blocked for more than",
    r"INFO: possible irq lock inversion",
    r"lockdep: ",
    r"kernel BUG at",
    r"Call Trace:",
]
# Reports of the sanitizers: looked for only where the kernel has them
# (--kconfig; all of them when the configuration is not known).
SANITIZER_PROBLEMS = {
    "KASAN": [r"KASAN: "],
    "UBSAN": [r"UBSAN: "],
    "DEBUG_KMEMLEAK": [
        r"unreferenced object",
        # kmemleak stopped tracking (its reports would be incomplete).
        r"Kernel memory leak detector disabled",
        r"kmemleak: Memory pool empty",
        r"kmemleak: Cannot allocate",
    ],
}

# KUnit suites of vamr.ko; every #[kunit_tests(name)] in src/ is expected too.
KUNIT_SUITES = ["vamr_kunit_events", "vamr_kunit_inval_log", "vamr_kunit_notifier", "vamr_kunit_region", "vamr_kunit_uapi"]
# The guest's set-up steps (scripts/guest/init), always present.
SETUP_SECTION = "guest_setup"
# Sections that do not exercise vamr: the stock rxe (rdma_baseline,
# rdma_verbs_edge on it) and the normal and ODP modes of rdma_va.
BASELINE_SECTIONS = {"rdma_baseline", "rdma_va_odp_stock", "rdma_verbs_edge_stock"}
# Sections that run a program a second time, with the programs they need:
# on the stock rxe, next to rdma_baseline, rdma_va's ODP variant
# (VAMR_ODP_STOCK=1), va_mr_jobs.sh --stock, rdma_verbs_edge and
# rdma_monitor (vamr loaded beside the stock rxe); in the unload phase,
# va_mr_jobs.sh --load (rdma_rxe loaded with va_mr=1).
STOCK_SECTIONS = {"rdma_va_odp_stock": ("rdma_va", "rdma_baseline"),
                  "va_mr_jobs_stock": ("va_mr_jobs.sh", "rdma_baseline"),
                  # The VA bit with other access bits, on a driver without VA MRs.
                  "rdma_verbs_edge_stock": ("rdma_verbs_edge", "rdma_baseline"),
                  "va_mr_jobs_load": ("va_mr_jobs.sh",),
                  # Monitor mode's registration cache of normal MRs, on the stock rxe.
                  "rdma_monitor_stock": ("rdma_monitor", "rdma_baseline")}
BASELINE_TESTS = re.compile(r"^rdma_va\.(normal|odp)\.")

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The kernel's report of a failed allocation (warn_alloc): expected during
# fault injection, together with the stack dump that follows it.
ALLOC_FAILURE = re.compile(r"(page allocation failure|vmalloc error): ")
# Lines between such a header and its "Call Trace:" (CPU, Hardware name, ...).
ALLOC_FAILURE_SPAN = 8
# The guest's phase markers (sanitizer run): "[ seconds] vamr-phase: <name>".
PHASE = re.compile(r"^\[\s*(\d+\.\d+)\] vamr-phase: (.*?)\s*$")

TAP_LINE = re.compile(r"^\s*(not ok|ok)\s+(\d+)\s*(?:-\s*)?([^#]*?)\s*(?:#\s*(.*))?$")
TAP_PLAN = re.compile(r"^(\s*)1\.\.(\d+)\b")


# A frame of a stack dump: "[ time]  func+0x1a/0x40 [module]" (also "? func", "<TASK>").
TRACE_FRAME = re.compile(r"^\[\s*\d+\.\d+\]\s+(\? )?([\w.]+\+0x[0-9a-f]+/0x[0-9a-f]+|<\w+>|</\w+>)")
# How many frames of the first report's stack are printed (CI shows only the summary).
TRACE_LINES = 24


def first_trace(lines, start):
    """The RIP line, lockdep's irq event stamps and the frames of the stack
    dump that follows the problem at lines[start]: printed with the summary, so
    that a run whose logs stay on the machine that ran it (CI) still says where
    the kernel was."""
    out = []
    frames = 0
    for line in lines[start + 1:start + 120]:
        if "RIP: " in line and not frames:
            out.append(line.strip())
        elif "irqs last " in line and not frames:
            # Lockdep's irq event stamps: where interrupts and softirqs were last
            # enabled and disabled (telling for a lockup).
            out.append(line.strip())
        elif TRACE_FRAME.search(line):
            frames += 1
            out.append(line.strip())
            if "</TASK>" in line or frames >= TRACE_LINES:
                break
        elif frames:
            break
    return out


def selftest_programs():
    """TEST_GEN_PROGS of tests/selftests/Makefile: the programs the image runs."""
    text = open(os.path.join(TOP, "tests/selftests/Makefile")).read().replace("\\\n", " ")
    m = re.search(r"^TEST_GEN_PROGS\s*:?=(.*)$", text, re.M)
    if not m or not m.group(1).split():
        sys.exit("collect-results.py: no TEST_GEN_PROGS in tests/selftests/Makefile")
    return m.group(1).split()


def kunit_suites():
    """KUNIT_SUITES and every #[kunit_tests(name)] of src/**/*.rs."""
    suites = set(KUNIT_SUITES)
    src = os.path.join(TOP, "src")
    for d, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            if f.endswith(".rs"):
                suites.update(re.findall(r"#\[(?:[\w:]*::)?kunit_tests\((\w+)\)\]", open(os.path.join(d, f)).read()))
    return suites


def kernel_config(path):
    """The CONFIG_ options set to y or m in a .config, or None when unknown."""
    if not path:
        return None
    opts = set()
    for line in open(path):
        m = re.match(r"^CONFIG_(\w+)=[ym]$", line.strip())
        if m:
            opts.add(m.group(1))
    return opts


def section_problems(label, kind, name, lines, rc, seen, expected, unexpected_hint):
    """What is wrong with one section as a whole: run twice, not expected, a bad TAP plan.
    Adds (kind, name) to seen."""
    problems = []
    if (kind, name) in seen:
        problems.append(f"{label}: ran twice")
    seen.add((kind, name))
    if (kind, name) not in expected:
        problems.append(f"{label}: not expected{unexpected_hint}")
    for p in plan_problems(lines, kind) if rc is not None else []:
        problems.append(f"{label}: {p}")
    return problems


def plan_problems(lines, kind):
    """Plans that do not match the results of a TAP section (top level only)
    or a KTAP section (every level: a plan counts the result lines of its
    indentation up to the result line of its parent)."""
    problems = []
    if kind != "kunit":
        plans = [int(m.group(2)) for m in map(TAP_PLAN.match, lines) if m and not m.group(1)]
        results = [ln for ln in lines if not ln.startswith((" ", "\t")) and TAP_LINE.match(ln)]
        if not plans:
            problems.append("no TAP plan (1..N)")
        elif len(plans) > 1:
            problems.append(f"{len(plans)} TAP plans")
        elif plans[0] != len(results):
            problems.append(f"plan 1..{plans[0]} but {len(results)} result(s)")
        return problems
    stack = []  # [indent, planned, seen]

    def close_below(indent):
        while stack and stack[-1][0] > indent:
            d, n, seen = stack.pop()
            if n != seen:
                problems.append(f"KTAP plan 1..{n} at indent {d} but {seen} result(s)")

    saw_plan = False
    for line in lines:
        indent = len(line) - len(line.lstrip())
        m = TAP_PLAN.match(line)
        if m:
            close_below(indent)
            stack.append([indent, int(m.group(2)), 0])
            saw_plan = True
            continue
        if TAP_LINE.match(line):
            close_below(indent)
            if stack and stack[-1][0] == indent:
                stack[-1][2] += 1
            else:
                problems.append(f"result without a plan: {line.strip()}")
    close_below(-1)
    if not saw_plan:
        problems.append("no KTAP plan (1..N)")
    return problems


def category(section, test):
    """vamr, baseline or setup: what a result is counted under."""
    if section == SETUP_SECTION:
        return "setup"
    if section in BASELINE_SECTIONS or (section == "rdma_va" and BASELINE_TESTS.match(test)):
        return "baseline"
    return "vamr"


def parse_sections(text):
    """Yield (kind, name, lines, rc) for every ### BEGIN/END section."""
    cur = None
    for line in text.splitlines():
        m = re.match(r"^### BEGIN (\S+) (\S+)$", line)
        if m:
            cur = (m.group(1), m.group(2), [])
            continue
        m = re.match(r"^### END (\S+) (\S+) rc=(-?\d+)$", line)
        if m and cur:
            yield cur[0], cur[1], cur[2], int(m.group(3))
            cur = None
            continue
        if cur:
            cur[2].append(line)
    if cur:
        yield cur[0], cur[1], cur[2], None  # section cut off: guest died


def tap_results(lines, kind):
    """Results of the leaf tests of a TAP/KTAP section.

    kselftest_harness prints top-level "ok N name". KUnit's KTAP nests the
    test cases of a suite one level deeper than the suite line; a KUnit
    result line is a leaf when no deeper result lines precede it.
    """
    results = []
    if kind == "kunit":
        entries = []
        for line in lines:
            m = TAP_LINE.match(line)
            if m:
                indent = len(line) - len(line.lstrip())
                entries.append((indent, m))
        for i, (indent, m) in enumerate(entries):
            has_children = i > 0 and entries[i - 1][0] > indent
            if not has_children:
                results.append(m)
    else:
        for line in lines:
            if line.startswith((" ", "\t")):
                continue
            m = TAP_LINE.match(line)
            if m:
                results.append(m)
    out = []
    for m in results:
        status, name, directive = m.group(1), m.group(3).strip(), (m.group(4) or "")
        if directive.upper().startswith("SKIP"):
            out.append(("SKIP", name, directive))
        elif status == "ok":
            out.append(("PASS", name, ""))
        else:
            out.append(("FAIL", name, directive))
    return out


def outcome_table(results):
    """The table of tests/selftests/rdma_va.c by MR kind, from its
    "# vamr-outcome <scenario> <mode> <op> <OUTCOME>" lines, or None: normal
    MRs, ODP on the stock rxe (mode odp-stock), ODP on the patched rxe (with
    the ODP fixes of patches/rxe), VA MRs.
    Lines of the fault-injection phase (sections of kind faultinj) are left out."""
    modes = ["normal", "odp-stock", "odp", "va"]
    heads = {"normal": "normal", "odp-stock": "ODP", "odp": "ODP (fixed rxe)", "va": "VA"}
    rows = {}
    injected = False
    for line in results.splitlines():
        if line.startswith("### BEGIN "):
            injected = line.startswith("### BEGIN faultinj ")
        elif line.startswith("### END "):
            injected = False
        if injected:
            continue
        m = re.match(r"^# vamr-outcome (\S+) (\S+) (\S+) (\S+)$", line.strip())
        if m:
            scenario, mode, op, outcome = m.groups()
            rows.setdefault((scenario, op), {})[mode] = outcome
    if not rows:
        return None
    # soft-iWARP (rdma_va with VAMR_IBDEV=siw0), when it ran: next to rxe's.
    for m, h in (("siw-normal", "siw normal"), ("siw-va", "siw VA")):
        if any(m in by_mode for by_mode in rows.values()):
            modes.append(m)
            heads[m] = h
    w = max(len(f"{s} {o}") for s, o in rows) + 2
    cw = {m: max(10, len(heads[m]) + 2) for m in modes}
    out = ["", "RDMA over a remapped MR, by MR kind (rdma_va; VA: CORRECT, or WCERR where nothing is mapped):",
           f"{'scenario':<{w}}" + "".join(f"{heads[m]:<{cw[m]}}" for m in modes)]
    for (scenario, op), by_mode in rows.items():
        out.append(f"{scenario + ' ' + op:<{w}}" + "".join(f"{by_mode.get(m, '-'):<{cw[m]}}" for m in modes))
    out.append("CORRECT: data where the CPU looks; STALE: went to / came from the old pages;")
    out.append("CORRUPT: other wrong bytes; WCERR: error completion; REGFAIL: registration failed;")
    out.append("-: not run in that mode. ODP: the stock rxe of Linux 7.3, which copies each packet to the")
    out.append("start of its page; ODP (fixed rxe): with patches/rxe 0008 (that copy) and 0009 (iova indexing).")
    return "\n".join(out) + "\n"


def sanitizer_summary(results, console, inj, expected_dumps, sanitizers):
    """Counts of the sanitizer run (reports, injected failures) and the
    guest's phase times, or None outside a sanitizer run."""
    phases = []
    for line in console.splitlines():
        m = PHASE.search(line)
        if m:
            phases.append((float(m.group(1)), m.group(2)))
    if not phases:
        return None
    out = [""]
    kasan = len(re.findall(r"BUG: KASAN: ", console))
    ubsan = len(re.findall(r"UBSAN: ", console))
    leaks = sum(int(n) for n in re.findall(
        r"^not ok \d+ no_unreferenced_objects # (\d+) unreferenced", results, re.M))
    warns = len(re.findall(r"WARNING: ", console))
    claims = []
    if "KASAN" in sanitizers:
        claims.append(f"{kasan} KASAN report(s)")
    if "UBSAN" in sanitizers:
        claims.append(f"{ubsan} UBSAN report(s)")
    if "DEBUG_KMEMLEAK" in sanitizers:
        claims.append(f"{leaks} unreferenced object(s) (kmemleak)")
    missing = [k for k in SANITIZER_PROBLEMS if k not in sanitizers]
    out.append("sanitizers: " + ", ".join(claims + [f"{warns} WARNING(s)"])
               + (f"; not in this kernel: {', '.join(missing)}" if missing else ""))
    injected = re.findall(r"^# vamr-faultinj injected (\S+) (\d+)$", results, re.M)
    if injected or sum(inj.values()):
        rng = re.search(r"^# vamr-faultinj range (\S+)", results, re.M)
        interval = re.search(r"^# vamr-faultinj interval (\d+)", results, re.M)
        total = sum(int(n) for _, n in injected)
        out.append(f"fault injection: {total} failure(s) injected ("
                   + ", ".join(f"{k} {n}" for k, n in injected) + ")"
                   + (f", every {interval.group(1)}th call from vamr.ko ({rng.group(1)})" if interval and rng else "")
                   + f"; tests under injection: {inj['PASS']} passed, {inj['FAIL']} failed (expected),"
                   f" {inj['SKIP']} skipped; {expected_dumps} allocation-failure report(s) (expected)")
    # Guest time per phase: from one marker to the next.
    times = []
    for (t, name), (t_next, _) in zip(phases, phases[1:]):
        times.append(f"{name} {t_next - t:.0f}s")
    out.append(f"guest phases (kernel clock): boot {phases[0][0]:.0f}s, " + ", ".join(times))
    return "\n".join(out)


def time_summary(results, label):
    """Where a guest's time went, from its "# vamr-uptime <mark> <s>" and
    "# vamr-time <kind> <name> <s> [cpu user <s> sys <s> idle <s>]" lines
    (scripts/guest/guest-lib.sh), or None: the kernel boot (up to the init
    script), the marks, and the sections, slowest first, with the vCPU
    seconds each kept busy (user + sys) when the line has them."""
    marks = re.findall(r"^# vamr-uptime (\S+) (\d+(?:\.\d+)?)$", results, re.M)
    secs = [(name, float(t), float(u) + float(k) if u else None) for _kind, name, t, u, k in
            re.findall(r"^# vamr-time (\S+) (\S+) (\d+(?:\.\d+)?)"
                       r"(?: cpu user (\d+(?:\.\d+)?) sys (\d+(?:\.\d+)?) idle \S+)?$",
                       results, re.M)]
    if not marks and not secs:
        return None
    line = f"{label} time (guest clock):"
    if marks:
        line += " " + ", ".join(f"{m} at {float(t):.0f}s" for m, t in marks)
    if secs:
        top = sorted(secs, key=lambda x: -x[1])
        busy = [c for _, _, c in secs if c is not None]
        line += (f"; {len(secs)} sections {sum(t for _, t, _ in secs):.0f}s"
                 + (f" ({sum(busy):.0f} vCPU-s busy)" if busy else "") + ", slowest: "
                 + ", ".join(f"{n} {t:.0f}s" + (f" ({c:.0f} busy)" if c is not None else "")
                             for n, t, c in top[:8]))
    return line


MPI_HEADS = {"stock": "stock MRs", "va_mr": "VA MRs (va_mr=1)", "preload": "VA MRs (LD_PRELOAD)"}


def mpi_table(results):
    """The side-by-side table of tests/mpi/mpi_remap from node a's
    "# vamr-mpi <mode> <iterations> <wrong iterations> <wrong bytes>
    <registrations rank0/rank1> <seconds> <status>" lines, or None."""
    cols = []
    for line in results.splitlines():
        m = re.match(r"^# vamr-mpi (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$", line.strip())
        if m:
            cols.append(m.groups())
    if not cols:
        return None
    gid = re.search(r"^# UCX_IB_GID_INDEX=(\d+)", results, re.M)
    sizes = re.search(r"^# stock: mpi_remap: rank 0 on \S+, (\d+) iterations of (\d+) MiB", results, re.M)

    def cell(c):
        mode, iters, wrong_it, wrong_b, reg, secs, status = c
        if status != "ok":
            return [status] * 4
        return [f"{wrong_it} of {iters}", wrong_b, reg, secs]

    rows = ["iterations with wrong bytes", "wrong bytes (of all received)",
            "ibv_reg_mr calls rank 0/rank 1", "mpirun time (TCG)"]
    cells = [cell(c) for c in cols]
    heads = [MPI_HEADS.get(c[0], c[0]) for c in cols]
    w = max(len(r) for r in rows) + 2
    cw = [max(12, len(h) + 2) for h in heads]
    out = ["", "Open MPI 4.1 + UCX 1.13 (PML ucx, rc_verbs, registration cache on), rank 0 on nodea,"
           " rank 1 on nodeb" + (f", {sizes.group(1)} iterations of {sizes.group(2)} MiB" if sizes else "")
           + (f", UCX_IB_GID_INDEX={gid.group(1)}" if gid else "") + ":",
           f"{'':<{w}}" + "".join(f"{h:<{cw[i]}}" for i, h in enumerate(heads))]
    for r, name in enumerate(rows):
        out.append(f"{name:<{w}}" + "".join(f"{cells[i][r]:<{cw[i]}}" for i in range(len(cols))))
    out.append("Buffers released and mapped again at the same address between iterations with raw")
    out.append("syscalls (munmap+mmap MAP_FIXED, MADV_DONTNEED), which UCX's memory hooks do not see.")
    return "\n".join(out) + "\n"


def remote_table(results):
    """The cross-node table of tests/pair/rdma_remote from node a's
    "# vamr-remote <scenario> <mode> <op> <OUTCOME>" lines, or None."""
    rows, modes = {}, []
    for line in results.splitlines():
        m = re.match(r"^# vamr-remote (\S+) (\S+) (\S+) (\S+)$", line.strip())
        if m:
            scenario, mode, op, outcome = m.groups()
            rows.setdefault((scenario, op), {})[mode] = outcome
            if mode not in modes:
                modes.append(mode)
    if not rows:
        return None
    heads = dict(MPI_HEADS, va="VA MRs (flag)", **{"siw-normal": "siw normal", "siw-va": "siw VA (flag)"})
    w = max(len(f"{s} {o}") for s, o in rows) + 2
    cw = {m: max(10, len(heads.get(m, m)) + 2) for m in modes}
    out = ["", "RDMA across the nodes over a remapped MR (tests/pair/rdma_remote: MR on nodeb, requester on nodea):",
           f"{'scenario':<{w}}" + "".join(f"{heads.get(m, m):<{cw[m]}}" for m in modes)]
    for (scenario, op), by_mode in rows.items():
        out.append(f"{scenario + ' ' + op:<{w}}" + "".join(f"{by_mode.get(m, '-'):<{cw[m]}}" for m in modes))
    return "\n".join(out) + "\n"


def fabric_table(results):
    """The libfabric table from node a's "# vamr-fabric <mode> node_a <bytes>
    node_b <bytes>" lines (tests/pair/node-a.sh, libfabric), or None."""
    cols = re.findall(r"^# vamr-fabric (\S+) node_a (\d+) node_b (\d+)$", results, re.M)
    if not cols:
        return None
    heads = [MPI_HEADS.get(m, m) for m, _, _ in cols]
    w = 34
    cw = [max(12, len(h) + 2) for h in heads]
    out = ["", "libfabric 1.17, verbs provider (fi_pingpong, data checked), nodea to nodeb:",
           f"{'':<{w}}" + "".join(f"{h:<{cw[i]}}" for i, h in enumerate(heads)),
           f"{'bytes through VA MRs, node a/b':<{w}}"
           + "".join(f"{a + '/' + b:<{cw[i]}}" for i, (_, a, b) in enumerate(cols))]
    return "\n".join(out) + "\n"


def check_pair(pairdir, tests, pair_rc, counts, broken, patterns):
    """The two-node run: results of both nodes into counts["pair"], problems
    into broken; returns node a's results text (for the tables)."""
    expected = {("tap", "setup_a"), ("tap", "setup_b")} | {("tap", t) for t in tests}
    # rdma_remote over soft-iWARP runs with rdma_remote when the patched siw
    # was staged (scripts/run-pair.sh gives the nodes siw's link then).
    if "rdma_remote" in tests and glob.glob(f"{pairdir}/run/modroot/lib/modules/*/updates/siw.ko*"):
        expected.add(("tap", "rdma_remote_siw"))
    seen = set()
    texts = {}
    for node in ("a", "b"):
        try:
            results = open(f"{pairdir}/{node}/results.log", errors="replace").read().replace("\r", "")
        except FileNotFoundError:
            results = ""
        texts[node] = results
        for kind, name, lines, rc in parse_sections(results):
            if kind == "demo":
                continue
            broken += section_problems(f"two-node section {kind} {name}", kind, name, lines, rc,
                                       seen, expected, "")
            res = tap_results(lines, kind)
            if not res:
                broken.append(f"two-node section {kind} {name}: no test results")
            for status, test, why in res:
                print(f"{status:4}  pair.{name}.{test}" + (f"  # {why}" if why else ""))
                counts["pair"][status] += 1
            if rc is None:
                broken.append(f"two-node section {kind} {name}: cut off (guest died?)")
            elif rc != 0:
                broken.append(f"two-node section {kind} {name}: exit status {rc}")
        if "### GUEST DONE" not in results:
            broken.append(f"node {node} did not reach its end marker (crash or timeout)")
        try:
            console = open(f"{pairdir}/{node}/console.log", errors="replace").read()
        except FileNotFoundError:
            console = ""
        n = 0
        clines = console.splitlines()
        for i, line in enumerate(clines):
            if any(re.search(pat, line) for pat in patterns):
                if n < 40:
                    print(f"KERNEL  node {node}: {line.strip()}")
                if n == 0:
                    for t in first_trace(clines, i):
                        print(f"TRACE   node {node}: {t}")
                n += 1
        if n:
            broken.append(f"{n} kernel problem line(s) in node {node}'s console.log")
    for kind, name in sorted(expected - seen):
        broken.append(f"two-node section {kind} {name}: expected but missing (did not run)")
    if pair_rc is not None and pair_rc != 0:
        broken.append(f"the two-node run ended with status {pair_rc}"
                      + (" (watchdog timeout)" if pair_rc == 124 else ""))
    for node in ("a", "b"):
        t = time_summary(texts[node], f"node {node}")
        if t:
            print(t)
    return texts["a"]


def include_other_runs(specs, counts):
    """--also LABEL=FILE: every result line of FILE (another run's output) as
    LABEL.<name>, counted under counts[LABEL], and its tables and kernel lines
    under a heading. Returns {LABEL: heading} for the summary. A missing or
    empty FILE is one failure of LABEL."""
    labels = {}
    for spec in specs:
        label, _, path = spec.partition("=")
        counts[label] = {"PASS": 0, "FAIL": 0, "SKIP": 0}
        labels[label] = label
        try:
            lines = open(path, errors="replace").read().splitlines()
        except FileNotFoundError:
            lines = []
        rest = []
        for line in lines:
            m = re.match(r"^(PASS|FAIL|SKIP)  (.*)$", line)
            if m:
                print(f"{m.group(1):4}  {label}.{m.group(2)}")
                counts[label][m.group(1)] += 1
            elif re.match(r"^\d+ passed, \d+ failed, \d+ skipped$", line):
                continue
            elif re.match(r"^(vamr|baseline|two-node|setup)[ :(]", line):
                continue
            else:
                rest.append(line)
            m = re.match(r"^== (.*)$", line)
            if m and label == labels[label]:
                labels[label] = f"{label} ({m.group(1)})"
        if not any(counts[label].values()):
            print(f"FAIL  {label}.guest: no results in {path}")
            counts[label]["FAIL"] += 1
        if any(l.strip() for l in rest):
            print(f"\n== {labels[label]}")
            print("\n".join(rest).strip("\n"))
    return labels


def main():
    ap = argparse.ArgumentParser(description="Turn the guest's logs into one result per test.")
    ap.add_argument("logdir")
    ap.add_argument("--guest-rc", type=int, default=None)
    ap.add_argument("--kconfig", default=None)
    ap.add_argument("--tests", default=None)
    ap.add_argument("--faultinj", default=None)
    ap.add_argument("--pair", default=None)
    ap.add_argument("--pair-tests", default="")
    ap.add_argument("--pair-rc", type=int, default=None)
    # LABEL=FILE: the output of another run of this script (scripts/test.sh's
    # distro section on Debian's stock kernel): its results count as LABEL.*.
    ap.add_argument("--also", action="append", default=[])
    args = ap.parse_args()
    logdir = args.logdir
    # LOGDIR "-": the two-node run (--pair) only.
    single = logdir != "-"
    if not single and not args.pair:
        sys.exit("collect-results.py: LOGDIR - needs --pair")
    try:
        results = open(f"{logdir}/results.log", errors="replace").read().replace("\r", "")
    except FileNotFoundError:
        results = ""
    try:
        console = open(f"{logdir}/console.log", errors="replace").read()
    except FileNotFoundError:
        console = ""
    kconfig = kernel_config(args.kconfig)
    sanitize = PHASE.search(console) is not None or args.faultinj is not None

    # What must be there.
    programs = args.tests.replace(",", " ").split() if args.tests is not None else selftest_programs()
    expected = {("tap", p) for p in programs}
    expected |= {("tap", s) for s, needs in STOCK_SECTIONS.items() if all(n in programs for n in needs)}
    expected.add(("tap", SETUP_SECTION))
    # The programs scripts/guest/init runs once more over siw0, when the patched siw was staged.
    if glob.glob(f"{logdir}/run/modroot/lib/modules/*/updates/siw.ko*"):
        expected |= {("tap", f"{p}_siw") for p in ("rdma_va", "rdma_special", "rdma_remote_wait") if p in programs}
    # A kernel without KUnit (Debian's stock kernel) runs no suite.
    if kconfig is None or "KUNIT" in kconfig:
        expected |= {("kunit", k) for k in kunit_suites()}
    if sanitize and (kconfig is None or "DEBUG_KMEMLEAK" in kconfig):
        expected |= {("tap", "kmemleak_loaded"), ("tap", "kmemleak_unloaded")}
    if args.faultinj:
        expected |= {("faultinj", p) for p in args.faultinj.replace(",", " ").split()}
    if not single:
        expected = set()

    counts = {c: {"PASS": 0, "FAIL": 0, "SKIP": 0} for c in ("vamr", "baseline", "pair", "setup")}
    broken = []
    seen = set()
    inj = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for kind, name, lines, rc in parse_sections(results):
        if kind == "demo":
            continue
        broken += section_problems(f"section {kind} {name}", kind, name, lines, rc, seen, expected,
                                   " (a stale program in the image?)")
        if kind == "faultinj":
            tests = tap_results(lines, "tap")
            for status, test, why in tests:
                inj[status] += 1
                if status != "PASS":
                    print(f"INJ   {name}.{test}: {status.lower()}" + (f"  # {why}" if why else ""))
            if rc is None:
                broken.append(f"section {kind} {name}: cut off (guest died?)")
            elif rc >= 128 or rc < 0:
                broken.append(f"section {kind} {name}: killed by signal {rc - 128 if rc >= 128 else -rc}")
            elif not tests:
                broken.append(f"section {kind} {name}: no test results")
            continue
        tests = tap_results(lines, kind)
        if not tests:
            broken.append(f"section {kind} {name}: no test results")
        for status, test, why in tests:
            print(f"{status:4}  {name}.{test}" + (f"  # {why}" if why else ""))
            counts[category(name, test)][status] += 1
        if rc is None:
            broken.append(f"section {kind} {name}: cut off (guest died?)")
        elif rc != 0:
            broken.append(f"section {kind} {name}: exit status {rc}")
    for kind, name in sorted(expected - seen):
        broken.append(f"section {kind} {name}: expected but missing (did not run)")

    if single and "### GUEST DONE" not in results:
        broken.append("the guest did not reach its end marker (crash or timeout)")
    if args.guest_rc is not None and args.guest_rc != 0:
        broken.append(f"the guest run ended with status {args.guest_rc}"
                      + (" (watchdog timeout)" if args.guest_rc == 124 else ""))
    if single and ("### GUEST DONE" not in results or args.guest_rc):
        # Where a run that did not end well stopped: the last words of the
        # kernel and of QEMU itself, so that a CI log alone tells why.
        for f in ("console.log", "qemu.log"):
            try:
                tail = open(f"{logdir}/{f}", errors="replace").read().splitlines()[-25:]
            except OSError:
                tail = ["(no such file)"]
            for line in tail:
                print(f"TAIL    {f}: {line}")

    # The sanitizers this kernel has; a sanitizer run without them is no sanitizer run.
    sanitizers = [k for k in SANITIZER_PROBLEMS if kconfig is None or k in kconfig]
    if sanitize and kconfig is not None:
        for k in SANITIZER_PROBLEMS:
            if k not in kconfig:
                broken.append(f"sanitizer run on a kernel without CONFIG_{k}")
    patterns = KERNEL_PROBLEMS + [p for k in sanitizers for p in SANITIZER_PROBLEMS[k]]

    problems = []
    trace = None
    expected_dumps = 0
    in_faultinj = False
    alloc_failure_at = None
    clines = console.splitlines()
    for i, line in enumerate(clines):
        m = PHASE.search(line)
        if m:
            in_faultinj = m.group(2) == "faultinj"
        if in_faultinj and ALLOC_FAILURE.search(line):
            alloc_failure_at = i
            expected_dumps += 1
            continue
        if (in_faultinj and "Call Trace:" in line and alloc_failure_at is not None
                and i - alloc_failure_at <= ALLOC_FAILURE_SPAN):
            alloc_failure_at = None
            continue
        for pat in patterns:
            if re.search(pat, line):
                problems.append(line.strip())
                if trace is None:
                    trace = first_trace(clines, i)
                break
    for p in problems[:40]:
        print(f"KERNEL  {p}")
    for t in trace or []:
        print(f"TRACE   {t}")
    if problems:
        broken.append(f"{len(problems)} kernel problem line(s) in console.log")
    pair_results = ""
    if args.pair:
        pair_results = check_pair(args.pair, args.pair_tests.replace(",", " ").split(), args.pair_rc,
                                  counts, broken, KERNEL_PROBLEMS)
    if sum(c["PASS"] + c["FAIL"] for c in counts.values()) == 0:
        broken.append("no test ran")
    # Each of these is a failed check of the guest run as a whole.
    for b in broken:
        print(f"FAIL  guest: {b}")
        counts["setup"]["FAIL"] += 1

    for table in (mpi_table(pair_results), remote_table(pair_results), fabric_table(pair_results),
                  outcome_table(results)):
        if table:
            print(table)
    t = time_summary(results, "one-node guest") if single else None
    if t:
        print(t)
    summary = sanitizer_summary(results, console, inj, expected_dumps, sanitizers)
    if summary:
        print(summary)
    also = include_other_runs(args.also, counts)
    print()
    labels = {"vamr": "vamr", "baseline": "baseline (normal/ODP MRs, stock rxe)",
              "pair": "two-node (Open MPI/UCX, rdma_remote, rping, perftest, libfabric)",
              "setup": "setup (guest steps, run checks)"}
    labels.update(also)
    for c, label in labels.items():
        if c == "pair" and not args.pair:
            continue
        if c in ("vamr", "baseline") and not single:
            continue
        n = counts[c]
        print(f"{label}: {n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped")
    passed, failed, skipped = (sum(c[k] for c in counts.values()) for k in ("PASS", "FAIL", "SKIP"))
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()

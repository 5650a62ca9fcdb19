#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turn the guest's logs into one result per test and a closing count.

usage: collect-results.py LOGDIR [--guest-rc N]

Reads LOGDIR/results.log (TAP and KTAP sections written by the guest's /init,
see scripts/guest/init) and LOGDIR/console.log (the kernel console).

Prints one line per test ("PASS|FAIL|SKIP  section.test"), the kernel
problems found in the console log, then the line
    N passed, N failed, N skipped
Exit status: 0 only when no test failed, every section ended with rc=0, the
guest reached its end marker, and the console shows no oops, panic, BUG,
WARN, lockdep report or hung task.

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
    r"UBSAN: ",
    r"KASAN: ",
    r"kernel BUG at",
    r"Call Trace:",
    r"unreferenced object",
    # kmemleak stopped tracking (its reports would be incomplete).
    r"Kernel memory leak detector disabled",
    r"kmemleak: Memory pool empty",
    r"kmemleak: Cannot allocate",
]

# The kernel's report of a failed allocation (warn_alloc): expected during
# fault injection, together with the stack dump that follows it.
ALLOC_FAILURE = re.compile(r"(page allocation failure|vmalloc error): ")
# Lines between such a header and its "Call Trace:" (CPU, Hardware name, ...).
ALLOC_FAILURE_SPAN = 8
# The guest's phase markers (sanitizer run): "[ seconds] vamr-phase: <name>".
PHASE = re.compile(r"^\[\s*(\d+\.\d+)\] vamr-phase: (.*?)\s*$")

TAP_LINE = re.compile(r"^\s*(not ok|ok)\s+(\d+)\s*(?:-\s*)?([^#]*?)\s*(?:#\s*(.*))?$")


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
    """The three-mode table of tests/selftests/rdma_va.c, from its
    "# vamr-outcome <scenario> <mode> <op> <OUTCOME>" lines, or None.
    Lines of the fault-injection phase (sections of kind faultinj) are left out."""
    modes = ["normal", "odp", "va"]
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
    w = max(len(f"{s} {o}") for s, o in rows) + 2
    out = ["", "RDMA over a remapped MR, by MR kind (rdma_va; VA: CORRECT, or WCERR where nothing is mapped):",
           f"{'scenario':<{w}}" + "".join(f"{m:<10}" for m in modes)]
    for (scenario, op), by_mode in rows.items():
        out.append(f"{scenario + ' ' + op:<{w}}" + "".join(f"{by_mode.get(m, '-'):<10}" for m in modes))
    out.append("CORRECT: data where the CPU looks; STALE: went to / came from the old pages;")
    out.append("CORRUPT: other wrong bytes; WCERR: error completion; REGFAIL: registration failed;")
    out.append("-: not run in that mode. ODP on rxe 7.3 copies each packet to the start of its page.")
    return "\n".join(out) + "\n"


def sanitizer_summary(results, console, inj, expected_dumps):
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
    out.append(f"sanitizers: {kasan} KASAN report(s), {ubsan} UBSAN report(s), "
               f"{leaks} unreferenced object(s) (kmemleak), {warns} WARNING(s)")
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


def main():
    logdir = sys.argv[1]
    try:
        results = open(f"{logdir}/results.log", errors="replace").read().replace("\r", "")
    except FileNotFoundError:
        results = ""
    try:
        console = open(f"{logdir}/console.log", errors="replace").read()
    except FileNotFoundError:
        console = ""

    passed = failed = skipped = 0
    broken = []
    inj = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for kind, name, lines, rc in parse_sections(results):
        if kind == "demo":
            continue
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
            if status == "PASS":
                passed += 1
            elif status == "FAIL":
                failed += 1
            else:
                skipped += 1
        if rc is None:
            broken.append(f"section {kind} {name}: cut off (guest died?)")
        elif rc != 0:
            broken.append(f"section {kind} {name}: exit status {rc}")

    if "### GUEST DONE" not in results:
        broken.append("the guest did not reach its end marker (crash or timeout)")

    problems = []
    expected_dumps = 0
    in_faultinj = False
    alloc_failure_at = None
    for i, line in enumerate(console.splitlines()):
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
        for pat in KERNEL_PROBLEMS:
            if re.search(pat, line):
                problems.append(line.strip())
                break
    for p in problems[:40]:
        print(f"KERNEL  {p}")
    if problems:
        broken.append(f"{len(problems)} kernel problem line(s) in console.log")
    if passed + failed == 0:
        broken.append("no test ran")
    # Each of these is a failed check of the guest run as a whole.
    for b in broken:
        print(f"FAIL  guest: {b}")
        failed += 1

    table = outcome_table(results)
    if table:
        print(table)
    summary = sanitizer_summary(results, console, inj, expected_dumps)
    if summary:
        print(summary)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()

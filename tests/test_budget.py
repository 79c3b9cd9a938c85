"""The verifier's budget (tracer/bpf_budget.h): `trace --budget` and
`cachestat --budget` load every program of trace, cachestat and cachetop in
each configuration and attach mode the loaders pick on this kernel, and
print each one's verified instructions and deepest stack. Every program of
the BPF objects that this kernel can load must be measured, and each must
stay at or below 500,000 instructions and 448 bytes of stack, but for the
overruns listed in KNOWN_OVER, each held at its own ceiling (the figure
measured when it was listed), so that none grows and none is forgotten when
it is fixed. The kernel matrix runs the same tools in each guest
(tests/kernels/guest_checks.py: budget)."""
import os
import re
import subprocess

import pytest

from conftest import REPO, require_root

TRACER = os.path.join(REPO, "tracer")
MAX_INSNS, MAX_STACK = 500_000, 448
ROW = re.compile(r"^(\S+) +(\S+) +(tp_btf|raw_tp) +(\S+) +(\d+) (info|log ) +(\d+) (\S+)$")
VERDICT = re.compile(r"^(trace|cachestat): budget: (\d+) programs verified; most instructions "
                     r"\d+ \(.*\), deepest stack \d+ bytes \(.*\); ceilings 500000 and 448: "
                     r"(ok|FAILED)$")

# (tool, program, flavour, config) -> (instructions, stack bytes) it must not
# exceed: the overruns on 6.18 known and not fixed yet. None since
# 2026-11-28: the xarray descent a global function (xa_chunk_entry), the
# walks of bios, fault-arounds and fault folios held per CPU
# (tracer/scratch.bpf.h), and the paths a kernel with bpf_loop never runs
# in frames of their own. The stack is the verifier's rule before 6.8
# (frames rounded up to 32 bytes, summed along the deepest chain of calls),
# the one 6.1 applies.
KNOWN_OVER = {}


# The same in the matrix's guests (tests/kernels: check "budget"), by kernel
# name, measured there on 2026-11-28 with the changes of KNOWN_OVER's
# comment: 5.10, 6.1 (tracepoints, fentry and kprobe fallbacks alike), 6.12
# and 7.3 have none.
KNOWN_OVER_ON = {
    "host": KNOWN_OVER,
    "5.10": {},
    "6.1": {},
    "6.12": {},
    "7.3": {},
}
# arm64: 6.12 held to x86-64's (make test-arm64, in CI); 6.1 (its fault start
# a kprobe on handle_mm_fault(), tracer/arch_faults.bpf.h, and the filemap
# functions kprobes) measured on 2026-11-28 with the changes above: none over.
KNOWN_OVER_ON["arm64-6.12"] = KNOWN_OVER_ON["6.12"]
KNOWN_OVER_ON["arm64-6.1"] = {}


def parse(stdout):
    """The rows of a --budget run: {(tool, program, flavour, config): (insns, stack)}."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("#"):
            continue
        m = ROW.match(line)
        assert m, f"not a budget row: {line!r}"
        tool, config, flavour, program, insns, _, stack, _ = m.groups()
        rows[tool, program, flavour, config] = (int(insns), int(stack))
    return rows


def loadable_programs(obj):
    """The programs of a BPF object that a kernel with tracepoints loads:
    each tp_btf/ and raw_tp/ function, and raw_tp ones that the loader
    attaches itself (the page-fault program, in section "raw_tp"), but the
    older block_bio_queue's (a kernel has one form of it) and the
    fentry/fexit fallbacks."""
    out = subprocess.run(["readelf", "-SsW", obj], capture_output=True, text=True,
                         check=True).stdout
    sections = dict(re.findall(r"^\s*\[\s*(\d+)\]\s+(\S+)", out, re.M))
    names = set()
    for ndx, name in re.findall(r"^\s*\d+: \S+ +\d+ FUNC +GLOBAL +DEFAULT +(\d+) (\S+)$",
                                out, re.M):
        section = sections.get(ndx, "")
        if (section == "raw_tp" or section.startswith(("tp_btf/", "raw_tp/"))) and \
                not name.endswith("_after_queue"):
            names.add(name)
    return names


# Programs of one source of faults (docs/fault-path.md, "Two sources"):
# a kernel loads those of the PTE hooks where they attach, else those of
# the fault events; the matrix measures both (its forced-events rows).
PTE_ONLY = {"btf_read_entry", "raw_read_entry"}
EVENTS_ONLY = {"raw_kern_entry", "btf_map_pages", "raw_map_pages"}


def this_kernels(programs, rows):
    """PROGRAMS less those of the source of faults that ROWS, a --budget
    run's, did not take: ROWS measured a PTE hook or none."""
    ptes = any(p in ("fentry_pte_range", "fentry_set_pte") for _, p, _, _ in rows)
    return programs - (EVENTS_ONLY if ptes else PTE_ONLY)


def judge(rows, programs, known=KNOWN_OVER):
    """The rows above a ceiling, each within its KNOWN figure; and every
    program of PROGRAMS measured."""
    over = {}
    for key, (insns, stack) in rows.items():
        if insns > MAX_INSNS or stack > MAX_STACK:
            over[key] = (insns, stack)
    # Every unknown or grown overrun at once, so that one run says them all.
    wrong = [f"{key}: {insns} instructions, {stack} bytes of stack"
             + ("" if key not in known else f": above its known {known[key]}")
             for key, (insns, stack) in sorted(over.items())
             if key not in known or insns > known[key][0] or stack > known[key][1]]
    assert wrong == [], "\n".join(wrong)
    assert {p for _, p, _, _ in rows} == programs
    return over


@pytest.mark.parametrize("tool,obj,tools", [
    ("trace", "trace.bpf.o", {"trace"}),
    ("cachestat", "cache.bpf.o", {"cachestat", "cachetop"}),
])
def test_budget_of_every_program(tool, obj, tools):
    require_root()
    proc = subprocess.run([os.path.join(TRACER, tool), "--budget"], capture_output=True,
                          text=True, timeout=600)
    rows = parse(proc.stdout)
    assert {t for t, _, _, _ in rows} == tools
    assert {f for _, _, f, _ in rows} == {"tp_btf", "raw_tp"}
    over = judge(rows, this_kernels(loadable_programs(os.path.join(TRACER, ".output", obj)),
                                    rows))
    verdict = proc.stderr.strip().splitlines()[-1]
    m = VERDICT.match(verdict)
    assert m and m.group(1) == tool and int(m.group(2)) == len(rows), proc.stderr
    assert (m.group(3) == "FAILED") == bool(over) and proc.returncode == (1 if over else 0)
    for key, figures in over.items():
        assert f"{key[0]} {key[1]} ({key[2]}, {key[3]}): {figures[0]} instructions" in proc.stderr
    fixed = [k for k in KNOWN_OVER if k[0] in tools and k not in over]
    assert not fixed, f"within budget now, drop from KNOWN_OVER: {fixed}"


@pytest.mark.unit
def test_the_judgement_fails_above_the_ceilings():
    programs = {"btf_fork"}
    ok = {("trace", "btf_fork", "tp_btf", "default"): (127, 32)}
    assert judge(ok, programs) == {}
    for figures in ((MAX_INSNS + 1, 32), (127, MAX_STACK + 16)):
        with pytest.raises(AssertionError):
            judge({("trace", "btf_fork", "tp_btf", "default"): figures}, programs)
    key = ("trace", "raw_map_pages", "raw_tp", "-x,--used")
    assert judge({key: (710_000, 512)}, {"raw_map_pages"}, {key: (710_000, 512)})
    with pytest.raises(AssertionError):   # a known overrun that grew
        judge({key: (710_001, 512)}, {"raw_map_pages"}, {key: (710_000, 512)})
    with pytest.raises(AssertionError):   # a program not measured
        judge(ok, programs | {"btf_exit"})
    # The programs of the source of faults the kernel took are all measured.
    pte = {("trace", "fentry_pte_range", "tp_btf", "--used"): (5450, 256)}
    assert this_kernels(programs | PTE_ONLY | EVENTS_ONLY, ok) == programs | EVENTS_ONLY
    assert this_kernels(programs | PTE_ONLY | EVENTS_ONLY, pte) == programs | PTE_ONLY
    with pytest.raises(AssertionError):
        judge(ok, this_kernels(programs | EVENTS_ONLY, ok))


@pytest.mark.parametrize("argv,said", [
    (["trace", "--budget", "-a"], "trace: --budget traces nothing: give it no command, -p or -a\n"),
    (["cachestat", "--budget", "1"], "cachestat: --budget: counts nothing: give it no INTERVAL "
                                     "or COUNT\n"),
])
def test_budget_with_a_target_is_one_line(argv, said):
    require_root()
    proc = subprocess.run([os.path.join(TRACER, argv[0]), *argv[1:]], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", said)

"""What trace says it costs, against the kernel's own figures.

trace turns the kernel's BPF run-time statistics on for its run (an fd from
bpf(BPF_ENABLE_STATS), never kernel.bpf_stats_enabled) and reports its
programs' run counts and run time: on stderr, in its trailer and, with -v,
per program, with its load time by phase. Ground truth:
  * the kernel's own counters of trace's programs (bpftool prog show, the
    program ids read from trace's fdinfo) while the command still runs;
  * the workload's own page faults (getrusage): the page-fault program
    runs at least once for each;
  * kernel.bpf_stats_enabled, read before, during and after;
  * which programs the kernel holds for trace (bpftool, by id), against
    what the mode needs.
"""
import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, require_root
from pagecache_util import evict, write_file
from test_cgroup import _free_loopback_port, attached
from trace_oracle import Trace

TRACE = os.path.join(REPO, "tracer", "trace")
CACHETOP = os.path.join(REPO, "tracer", "cachetop")
STATS = "/proc/sys/kernel/bpf_stats_enabled"
MiB = 1 << 20
COST = re.compile(r"^trace: BPF cost: ([\d.]+) ms in (\d+) runs \((\d+) ns a run\)", re.M)
PROGRAM = re.compile(r"^# bpf: (\S+) runs=(\d+) run_time_ns=(\d+) missed=(\d+)$", re.M)

# A workload that faults on 300 pages of a cold file one at a time, prints
# its own fault count, then waits for a line on stdin (or 20 s).
FAULTS = textwrap.dedent("""
    import mmap, os, resource, select, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for page in range(0, 600, 2):
        m[page * 4096]
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(after.ru_minflt + after.ru_majflt - before.ru_minflt - before.ru_majflt, flush=True)
    select.select([sys.stdin], [], [], 20)
""")


@pytest.fixture
def cold_file(ext4_image, request):
    path = os.path.join(ext4_image, request.node.name.replace("[", "_").replace("]", "") + ".bin")
    write_file(path, 4 * MiB)
    evict(path)
    yield path
    os.unlink(path)


@contextlib.contextmanager
def stats_sysctl(value):
    """kernel.bpf_stats_enabled set to VALUE for the block, put back after."""
    before = open(STATS).read().strip()
    with open(STATS, "w") as f:
        f.write(value)
    try:
        yield
    finally:
        with open(STATS, "w") as f:
            f.write(before)


def trace_program_ids(pid):
    """The ids of the BPF programs process PID holds (its fds' fdinfo)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        with contextlib.suppress(OSError):
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
            ids.update(int(m) for m in re.findall(r"^prog_id:\s*(\d+)", text, re.M))
    return ids


def kernel_programs(pid):
    """{name: (run_cnt, run_time_ns)} of PID's programs, from bpftool."""
    ids = trace_program_ids(pid)
    shown = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                                      text=True, check=True).stdout)
    # The kernel keeps 15 characters of a name; bpftool may print the whole
    # one, from the program's BTF: keyed by the kernel's 15.
    return {p["name"][:15]: (p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in shown if p["id"] in ids}


def start_traced(*options, path, log, env=None):
    """trace OPTIONS around the FAULTS workload on PATH, the workload's
    stdin a pipe: returns the Popen once the workload has faulted, and its
    fault count."""
    require_root()
    # stderr to a file: -v says more than a pipe holds before the command starts.
    err = open(f"{log}.err", "w+")
    proc = subprocess.Popen([TRACE, *options, "-o", str(log), "--", sys.executable, "-c",
                             FAULTS, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True, env=env)
    proc.err_file = err
    line = proc.stdout.readline()
    assert line, "trace ended: " + open(f"{log}.err").read()[-3000:]
    return proc, int(line)


def finish(proc):
    proc.communicate("go\n", timeout=60)
    proc.err_file.seek(0)
    err = proc.err_file.read()
    proc.err_file.close()
    assert proc.returncode == 0, err[-3000:]
    return err


def test_cost_is_the_kernels_own_count(cold_file, tmp_path):
    log = tmp_path / "t.log"
    sysctl_before = open(STATS).read().strip()
    proc, faults = start_traced("--used", "-v", path=cold_file, log=log)
    # The workload waits: the kernel's counters of trace's programs, now.
    mid_run = kernel_programs(proc.pid)
    sysctl_during = open(STATS).read().strip()
    err = finish(proc)
    assert open(STATS).read().strip() == sysctl_before == sysctl_during
    text = log.read_text()
    programs = {m[0]: (int(m[1]), int(m[2]), int(m[3])) for m in PROGRAM.findall(text)}
    trailer = Trace(text).trailer
    # The statistics were on (the fd, not the sysctl): the kernel counted.
    assert mid_run and all(ns > 0 for runs, ns in mid_run.values() if runs > 0)
    assert {n[:15] for n in programs} == set(mid_run)
    for name, (runs, ns, missed) in programs.items():
        kernel_runs, kernel_ns = mid_run[name[:15]]
        assert runs >= kernel_runs and ns >= kernel_ns, name
        assert runs == 0 or 10 <= ns / runs <= 200_000, (name, runs, ns)
    # Each of the workload's faults ran the kernel-entry program (one for
    # both of x86's fault tracepoints and sys_enter).
    assert programs["raw_kern_entry"][0] >= faults >= 300
    assert int(trailer["bpf_runs"]) == sum(r for r, _, _ in programs.values())
    assert int(trailer["bpf_ns"]) == sum(ns for _, ns, _ in programs.values())
    # The summary line says the same total; -v, one line a program.
    total = COST.search(err)
    assert total and int(total[2]) == int(trailer["bpf_runs"]), err
    assert abs(float(total[1]) - int(trailer["bpf_ns"]) / 1e6) <= 0.05 + 1e-3 * float(total[1])
    for name in programs:
        assert re.search(rf"^trace: BPF cost: {name} +\d+ runs", err, re.M), name


def test_sysctl_already_on_is_left_on(cold_file, tmp_path):
    require_root()
    log = tmp_path / "t.log"
    with stats_sysctl("1"):
        proc, _ = start_traced(path=cold_file, log=log)
        err = finish(proc)
        assert open(STATS).read().strip() == "1"
    assert COST.search(err), err
    assert int(Trace(log.read_text()).trailer["bpf_runs"]) > 0


@pytest.mark.parametrize("sysctl", ["0", "1"])
def test_not_measured_when_the_kernel_refuses(cold_file, tmp_path, sysctl):
    # Without CAP_SYS_ADMIN the kernel refuses BPF_ENABLE_STATS (and the
    # sysctl): no figure, said. Where the sysctl is on anyway, the
    # counters count all along, and are trace's own programs'.
    require_root()
    log = tmp_path / "t.log"
    with stats_sysctl(sysctl):
        proc = subprocess.run(["capsh", "--drop=cap_sys_admin", "--", "-c",
                               f"exec {TRACE} -o {log} -- cat {cold_file}"],
                              capture_output=True, text=True, errors="replace", timeout=60)
        assert open(STATS).read().strip() == sysctl
    assert proc.returncode == 0, proc.stderr
    trailer = Trace(log.read_text()).trailer
    if sysctl == "1":
        assert COST.search(proc.stderr), proc.stderr
        assert int(trailer["bpf_runs"]) > 0
        return
    assert ("trace: BPF cost: not measured (the kernel refused BPF run-time statistics: "
            "Operation not permitted)\n") in proc.stderr
    assert "bpf_ns" not in trailer and trailer["bpf_missed"] == "0"
    assert "# bpf: not measured (the kernel refused" in log.read_text()


def test_no_cost_option(tmp_path):
    require_root()
    log = tmp_path / "t.log"
    with stats_sysctl("0"):
        proc = subprocess.run([TRACE, "--no-cost", "-o", str(log), "--", "true"],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "trace: BPF cost: not measured (--no-cost)\n" in proc.stderr
    assert "bpf_ns" not in Trace(log.read_text()).trailer


# The programs a mode loads (their names as the kernel keeps them, 15
# characters), tp_btf on this machine: reads and tasks always; the cause
# column's (-x) readahead programs only with -x.
BASE = {"btf_bio_queue", "btf_fork", "btf_exit", "btf_exec"}
CAUSE = {name[:15] for name in ("btf_sync_ra", "btf_async_ra", "btf_ra_unbounded",
                                 "btf_ra_order", "btf_fault", "btf_get_pages")}


@pytest.mark.parametrize("options", [(), ("-x",), ("--used",)], ids=["trace", "x", "used"])
def test_only_the_programs_the_mode_needs_are_loaded(cold_file, tmp_path, options):
    proc, _ = start_traced(*options, path=cold_file, log=tmp_path / "t.log")
    loaded = set(kernel_programs(proc.pid))
    finish(proc)
    if options == ("--used",):
        # One flavour of each, and no readahead program: the page-access set is
        # the fault path's own (it changes with its design). The kernel-entry
        # program is raw_tp in tp_btf loads too, one for both fault
        # tracepoints and sys_enter.
        assert BASE < loaded and "raw_kern_entry" in loaded, loaded
        assert all(n.startswith("btf_") for n in loaded - {"raw_kern_entry"}), loaded
        assert not loaded & (CAUSE - {"btf_fault", "btf_get_pages"}), loaded
    else:
        assert loaded == (BASE | CAUSE if options else BASE)


def test_load_time_is_printed_with_v(tmp_path):
    require_root()
    began = time.monotonic()
    proc = subprocess.run([TRACE, "-v", "-o", str(tmp_path / "t.log"), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    whole = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    line = re.search(r"^trace: load: ([\d.]+) s to tracing: (.*)$", proc.stderr, re.M)
    assert line, proc.stderr
    phases = {name.strip(): float(t) for name, t in
              re.findall(r"([A-Za-z -]+?) ([\d.]+)(?:,|$)", line[2])}
    assert {"kernel BTF", "CO-RE BTF", "open", "attach choice", "load", "attach",
            "start"} <= set(phases), phases
    assert 0 < float(line[1]) < whole
    assert abs(sum(phases.values()) - float(line[1])) <= 0.002 * len(phases)
    verifier = re.search(r"^trace: load: verifier: (.*) all ([\d.]+) s$", proc.stderr, re.M)
    assert verifier and "btf_bio_queue" in verifier[1], proc.stderr
    assert float(verifier[2]) <= phases["load"] + 0.001


def test_cachetop_json_carries_the_cost(cold_file):
    require_root()
    proc = subprocess.run([CACHETOP, "-j", "-c", f"cat {cold_file}"], capture_output=True,
                          text=True, errors="replace", timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["bpf_runs"] > 0 and report["bpf_ns"] > 0
    assert 10 <= report["bpf_ns"] / report["bpf_runs"] <= 200_000
    assert report["bpf_missed"] == 0
    # One entry a loaded program, adding up to the totals.
    programs = report["bpf_programs"]
    assert len(programs) >= 5 and len({p["name"] for p in programs}) == len(programs)
    assert sum(p["runs"] for p in programs) == report["bpf_runs"]
    assert sum(p["ns"] for p in programs) == report["bpf_ns"]


def bpf_stats_held(pid):
    """Does process PID hold a BPF_ENABLE_STATS descriptor?"""
    fds = f"/proc/{pid}/fd"
    return any(os.readlink(os.path.join(fds, fd)) == "anon_inode:bpf-stats"
               for fd in os.listdir(fds))


@pytest.mark.parametrize("tool", [
    [CACHETOP, "-j", "60"],
    [os.path.join(REPO, "tracer", "cachestat"), "-j", "60"],
    [os.path.join(REPO, "tracer", "cachestat"), "--openmetrics", "PORT", "-j", "60"],
    [CACHETOP, "-j", "-c", "sleep 5"]], ids=["cachetop", "cachestat", "exporter", "cachetop -c"])
def test_only_a_tool_that_reports_its_cost_turns_statistics_on(tool):
    """BPF run-time statistics tax every BPF program on the host while on:
    a monitor that never reports its cost (cachestat, its exporter,
    cachetop by interval) holds no BPF_ENABLE_STATS descriptor once its
    programs are attached; cachetop -c, which reports it, does."""
    require_root()
    port = f"127.0.0.1:{_free_loopback_port()}"
    tool = [port if arg == "PORT" else arg for arg in tool]
    proc = subprocess.Popen(tool, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        attached(proc)
        assert bpf_stats_held(proc.pid) == ("-c" in tool)
    finally:
        proc.kill()
        proc.wait()


def xlated_programs(pid):
    """{name: the kernel's translation of the program, as bpftool prints it}
    of PID's programs, map ids and kernel addresses masked (they differ
    from one load to the next)."""
    shown = {p["id"]: p["name"] for p in json.loads(subprocess.run(
        ["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout)}
    programs = {}
    for prog_id in trace_program_ids(pid):
        text = subprocess.run(["bpftool", "prog", "dump", "xlated", "id", str(prog_id)],
                              capture_output=True, text=True, check=True).stdout
        text = re.sub(r"map\[id:\d+\]", "map[id:N]", text)
        programs[shown[prog_id]] = re.sub(r"0x[0-9a-f]{16}", "ADDRESS", text)
    return programs


def test_cut_btf_and_split_load_load_the_same_programs(cold_file, tmp_path):
    # Every program of -x --used, loaded as trace loads it (relocated against
    # the cut-down BTF, in two halves at once), against the whole BTF in one
    # load: the kernel's translations must be the same.
    runs, said = [], []
    for knobs in ({}, {"PAGETRACE_CORE_BTF": "full", "PAGETRACE_SPLIT_LOAD": "0"}):
        proc, _ = start_traced("-v", "-x", "--used", path=cold_file, log=tmp_path / "t.log",
                               env=dict(os.environ, **knobs))
        runs.append(xlated_programs(proc.pid))
        said.append(finish(proc))
    cut = re.search(r"^trace: load: CO-RE against (\d+) of the kernel's (\d+) types$", said[0],
                    re.M)
    assert cut and int(cut[1]) < int(cut[2]) / 10, said[0]
    assert "trace: load: CO-RE against the kernel's whole BTF" in said[1]
    halves = "trace: load: the programs verified in two halves at once\n"
    assert halves in said[0] and halves not in said[1]
    assert len(runs[0]) >= 11 and set(runs[0]) == set(runs[1])
    for name in runs[0]:
        assert runs[0][name] == runs[1][name], name


def test_split_load_halves_share_what_the_kernel_verifies(tmp_path):
    # A split load's halves are chosen by each program's linked size, foreseen
    # from the object's ELF (tracer/linked_size.c): each must be what libbpf
    # then linked, and the halves must share what the kernel verified (its own
    # count, the verifier's statistics): the heavier at most 1.5 times the
    # lighter. Balanced by the programs' own sections, as before, it was 7.
    require_root()
    proc = subprocess.run([TRACE, "-v", "-x", "--used", "-o", str(tmp_path / "t.log"), "--",
                           "true"], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PAGETRACE_SPLIT_LOAD="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    verifier = re.search(r"^trace: load: verifier: (.*) all [\d.]+ s$", proc.stderr, re.M)
    assert verifier, proc.stderr[-3000:]
    verified = {name: int(n) for name, n in
                re.findall(r"(\w+) [\d.]+ s \((\d+) insns\)", verifier[1])}
    halves = re.findall(r"^trace: load: half ([12]): (\w+), (\d+) instructions linked "
                        r"\(foreseen (\d+)\)$", proc.stderr, re.M)
    assert sorted(name for _, name, _, _ in halves) == sorted(verified), proc.stderr[-3000:]
    for _, name, linked, foreseen in halves:
        assert linked == foreseen, name
    weight = {half: sum(verified[name] for h, name, _, _ in halves if h == half)
              for half in "12"}
    assert max(weight.values()) <= 1.5 * min(weight.values()), weight

"""`pagetrace doctor`, the tools' self-check, on the host's kernel: it
vouches for every column here, within 5 s, and exits 0 (--strict too; its
--json says the same); it vouches for nothing where it cannot make a
scratch file on a disk; it refuses a tool that prints wrong numbers (a
wrapper that shifts the real tool's output by one page), a '-' for a cause
this kernel tells, a tool that does not load for another reason than what
the kernel lacks, and a lack the kernel's BTF contradicts; and it lists a
tool that does not load for what the kernel lacks as "not available on this
kernel" and exits 0 (--strict: 1). Ground truth is the doctor's own
(mincore, cachestat(2), /proc/diskstats, the kernel's BTF); these tests
check that its verdicts follow the numbers, both ways. What a kernel truly
lacks (6.1's readahead: tracepoints, 5.10's filemap_get_pages) is checked
by the kernel matrix (tests/kernels: self_check)."""
import json
import os
import shlex
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import loopimg
from conftest import REPO
from pagetrace.tools import doctor_kit
from pagetrace.tools.doctor import CAUSE_TRACEPOINTS, judge_no_cause

PAGETRACE = os.path.join(REPO, ".venv", "bin", "pagetrace")


def doctor(*args, timeout=60):
    return subprocess.run([PAGETRACE, "doctor", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def leftovers():
    """Scratch directories and cgroups a doctor left behind."""
    found = [n for n in os.listdir("/var/tmp") if n.startswith("pagetrace-doctor.")]
    with open("/proc/self/mounts") as f:
        for root in [l.split()[1] for l in f if l.split()[2] == "cgroup2"]:
            found += [n for n in os.listdir(root) if n.startswith("pagetrace-doctor.")]
    return found


def test_host_vouches_every_column_within_5s():
    loopimg.require_root()
    start = time.monotonic()
    done = doctor()
    elapsed = time.monotonic() - start
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines and all(l.split(": ", 2)[2].startswith("vouched") for l in lines), done.stdout
    assert "0 not available on this kernel, 0 refused: every number printed is right" \
        in done.stderr
    for tool in ("trace --attach tp_btf", "trace --attach raw_tp",
                 "cachestat --cgroup", "cachetop --cgroup"):
        assert sum(l.startswith(tool + ":") for l in lines) >= 8, (tool, done.stdout)
    for column in ("offset", "misses", "hits", "processes.misses", "cause"):
        assert any(f": {column}: vouched" in l for l in lines), column
    assert elapsed < 5.0, f"{elapsed:.1f} s"
    assert not leftovers()


def test_read_only_scratch_directory_vouches_nothing():
    loopimg.require_root()
    with loopimg.loop_mount(size_mib=16) as (mnt, _loop):
        loopimg.run("mount", "-o", "remount,ro", mnt)
        done = doctor("--dir", mnt)
    assert done.returncode == 2
    assert "vouched" not in done.stdout
    assert "Read-only file system" in done.stderr and "nothing vouched" in done.stderr


def test_memory_file_system_vouches_nothing():
    loopimg.require_root()
    with loopimg.ram_mount("tmpfs") as mnt:
        done = doctor("--dir", mnt)
    assert done.returncode == 2
    assert "vouched" not in done.stdout
    assert "no block device" in done.stderr


def test_json_and_strict_on_the_host():
    """--json --strict: one document whose verdicts are all vouched, its
    counts and exit status those of the run; the memory file system's
    refusal to check is a document too, with exit status 2."""
    loopimg.require_root()
    done = doctor("--json", "--strict")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["strict"] and doc["exit_status"] == 0 and doc["error"] is None
    assert doc["release"] == os.uname().release
    verdicts = doc["verdicts"]
    assert len(verdicts) == doc["vouched"] >= 36 and doc["refused"] == doc["not_available"] == 0
    assert {v["verdict"] for v in verdicts} == {"vouched"}
    assert {"tool": "trace --attach raw_tp", "column": "cause", "verdict": "vouched",
            "detail": "forced_ra"} in verdicts
    with loopimg.ram_mount("tmpfs") as mnt:
        done = doctor("--json", "--dir", mnt)
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert doc["exit_status"] == 2 and "no block device" in doc["error"] and not doc["verdicts"]


# A wrapper of the real trace that rewrites one column of each record:
# FIELD's value becomes VALUE (an expression of it, `v`).
REWRITTEN_TRACE = """
import subprocess, sys
args = sys.argv[1:]
rc = subprocess.call([{real!r}, *args])
out = args[args.index("-o") + 1]
lines = open(out).read().splitlines()
with open(out, "w") as f:
    for line in lines:
        fields = line.split(" ")
        if not line.startswith("#") and len(fields) > {field}:
            v = fields[{field}]
            fields[{field}] = {value}
        f.write(" ".join(fields) + "\\n")
sys.exit(rc)
"""
# The real tool's numbers off by one: a page's offset, a miss.
OFF_BY_ONE_TRACE = dict(body=REWRITTEN_TRACE, field=2, value="str(int(v) + 4096)")
OFF_BY_ONE_CACHESTAT = """
import json, subprocess, sys
done = subprocess.run([{real!r}, *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
for line in done.stdout.splitlines():
    row = json.loads(line)
    row["misses"] += 1
    print(json.dumps(row))
sys.exit(done.returncode)
"""


def fake(tmp_path, name, body, **fields):
    path = tmp_path / name
    real = os.path.join(REPO, "tracer", name)
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body.format(real=real, **fields)))
    path.chmod(0o755)
    return str(path)


def test_trace_off_by_one_page_is_refused(tmp_path):
    loopimg.require_root()
    done = doctor("--tool", "trace", "--trace-binary",
                  fake(tmp_path, "trace", **OFF_BY_ONE_TRACE))
    assert done.returncode == 1
    for mode in ("tp_btf", "raw_tp"):
        assert f"trace --attach {mode}: offset: refused: " in done.stdout, done.stdout
    assert not any(": offset: vouched" in l for l in done.stdout.splitlines())


def test_cachestat_one_miss_too_many_is_refused(tmp_path):
    loopimg.require_root()
    done = doctor("--tool", "cachestat", "--cachestat-binary",
                  fake(tmp_path, "cachestat", OFF_BY_ONE_CACHESTAT))
    assert done.returncode == 1
    assert "cachestat --cgroup: misses: refused: 65, the kernel says 64" in done.stdout
    assert "cachestat --cgroup: hits: vouched" in done.stdout
    assert not leftovers()


def test_trace_dash_for_a_cause_this_kernel_tells_is_refused(tmp_path):
    """'-' in the cause column is "not available" only where the kernel
    lacks a readahead: tracepoint; this one has them all."""
    loopimg.require_root()
    done = doctor("--tool", "trace", "--trace-binary",
                  fake(tmp_path, "trace", REWRITTEN_TRACE, field=6, value='"-"'))
    assert done.returncode == 1
    for mode in ("tp_btf", "raw_tp"):
        assert (f"trace --attach {mode}: cause: refused: '-', though the kernel has the "
                "readahead: tracepoints that tell it") in done.stdout, done.stdout
        assert f"trace --attach {mode}: offset: vouched" in done.stdout
    assert "not available" not in done.stdout


def refusing(tmp_path, name, *lines):
    """A tool that says LINES on stderr and exits 1, as a tool that does not
    load does."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + "".join(f"echo {shlex.quote(l)} >&2\n" for l in lines)
                    + "exit 1\n")
    path.chmod(0o755)
    return str(path)


LACKS_NOTHING_REAL = ("cachestat: kernel lacks tracepoint filemap:mm_filemap_no_such_point, "
                      "which it needs")


def test_a_tool_the_kernel_cannot_load_is_not_available(tmp_path):
    """A cache tool that does not load, each line naming a tracepoint the
    kernel's BTF lacks: "not available on this kernel", exit 0 beside a
    vouched trace; --strict exits 1; alone, nothing is vouched: 1."""
    loopimg.require_root()
    tool = refusing(tmp_path, "cachestat", LACKS_NOTHING_REAL,
                    "cachestat: the kernel lacks bpf_loop (v5.17), which it needs".replace(
                        "bpf_loop", "a_helper_of_no_kernel"))
    line = ("cachestat --cgroup: all columns: not available on this kernel: it does not start: "
            + LACKS_NOTHING_REAL)
    done = doctor("--tool", "trace", "--tool", "cachestat", "--cachestat-binary", tool)
    assert done.returncode == 0, done.stdout + done.stderr
    assert line in done.stdout and "(the tool's word: not in the BTF to check)" in done.stdout
    assert "1 not available on this kernel, 0 refused: every number printed is right" \
        in done.stderr
    assert "trace --attach raw_tp: offset: vouched" in done.stdout
    strict = doctor("--strict", "--tool", "cachestat", "--cachestat-binary", tool)
    alone = doctor("--tool", "cachestat", "--cachestat-binary", tool)
    assert strict.returncode == alone.returncode == 1
    assert line in strict.stdout and line in alone.stdout
    assert "nothing vouched" in alone.stderr
    assert not leftovers()


@pytest.mark.parametrize("said, why", [
    ("cachestat: kernel lacks tracepoint sched:sched_process_fork, which it needs",
     "yet the kernel's BTF has it"),
    ("cachestat: kernel lacks tracepoint filemap:mm_filemap_get_pages, nor its function in "
     "BTF for fentry, which it needs", "yet the kernel's BTF has it"),
    ("cachestat: the kernel lacks bpf_loop (v5.17), which it needs",
     "yet the kernel's BTF has it"),
    ("cachestat: loading BPF programs: Invalid argument (rerun with -v for the verifier's log)",
     "Invalid argument")])
def test_a_tool_that_does_not_load_where_it_should_is_refused(tmp_path, said, why):
    """A lack this kernel's BTF contradicts, or a load error that names no
    lack, is a refusal (exit 1), never "not available"."""
    loopimg.require_root()
    done = doctor("--tool", "cachestat", "--cachestat-binary",
                  refusing(tmp_path, "cachestat", LACKS_NOTHING_REAL, said))
    assert done.returncode == 1
    assert done.stdout.startswith("cachestat --cgroup: all columns: refused: it did not start: ")
    assert why in done.stdout and "not available" not in done.stdout


# ----- without root: the kernel's BTF, the verdicts and the exit status -----

def tiny_btf(tmp_path, typedefs=(), funcs=(), enumerators=()):
    """A BTF file of an int, the typedefs, functions and one enum given."""
    strings, types = bytearray(b"\0"), bytearray()

    def name(text):
        strings.extend(text.encode() + b"\0")
        return len(strings) - len(text) - 1
    types += struct.pack("<III", name("int"), 1 << 24, 4) + struct.pack("<I", 32)
    for t in typedefs:
        types += struct.pack("<III", name(t), 8 << 24, 1)
    for f in funcs:
        types += struct.pack("<III", name(f), 12 << 24, 1)
    types += struct.pack("<III", name("e"), 6 << 24 | len(enumerators), 4)
    for i, e in enumerate(enumerators):
        types += struct.pack("<Ii", name(e), i)
    # A new name each: btf_names() keeps what it read of a path.
    path = tmp_path / f"vmlinux.{len(list(tmp_path.iterdir()))}"
    path.write_bytes(struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types),
                                 len(strings)) + types + strings)
    return str(path)


def test_what_the_kernel_lacks_from_its_btf(tmp_path):
    btf = tiny_btf(tmp_path, typedefs=["btf_trace_page_cache_sync_ra", "btf_trace_sys_enter"],
                   funcs=["filemap_get_pages"], enumerators=["BPF_FUNC_map_lookup_elem"])
    assert doctor_kit.missing_tracepoints(CAUSE_TRACEPOINTS, btf) == \
        list(CAUSE_TRACEPOINTS[1:])
    has = {line: doctor_kit.kernel_has_what(line, btf) for line in (
        "x: kernel lacks tracepoint raw_syscalls:sys_enter, which it needs",
        "x: kernel lacks tracepoint filemap:mm_filemap_get_pages, nor its function in BTF for "
        "fentry, which it needs",
        "x: kernel lacks tracepoint filemap:mm_filemap_fault, nor its function in BTF for "
        "fentry, which it needs",
        "x: kernel lacks tracepoint filemap:mm_filemap_get_pages, which it needs",
        "x: the kernel lacks bpf_loop (v5.17), which it needs",
        "x: kernel lacks fentry/fexit on kernel functions (BPF trampolines)")}
    assert list(has.values()) == [True, True, False, False, False, None]
    loop = tiny_btf(tmp_path, enumerators=["BPF_FUNC_loop"])
    assert doctor_kit.kernel_has_what("x: the kernel lacks bpf_loop (v5.17)", loop)
    (tmp_path / "junk").write_bytes(b"\0" * 64)
    assert doctor_kit.btf_names(str(tmp_path / "junk")) is None
    assert doctor_kit.kernel_has_what(LACKS_NOTHING_REAL, str(tmp_path / "junk")) is None


def test_no_cause_is_not_available_only_where_the_btf_lacks_it(tmp_path, capsys):
    lacking = tiny_btf(tmp_path, typedefs=["btf_trace_page_cache_sync_ra"])
    report = doctor_kit.Report()
    judge_no_cause(report, "trace --attach raw_tp", lacking)
    every = tiny_btf(tmp_path, typedefs=[f"btf_trace_{t}" for t in CAUSE_TRACEPOINTS])
    judge_no_cause(report, "trace --attach tp_btf", every)
    judge_no_cause(report, "trace --attach tp_btf", str(tmp_path / "none"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("trace --attach raw_tp: cause: not available on this kernel: "
                               "the kernel lacks readahead:page_cache_async_ra, ")
    assert lines[1].startswith("trace --attach tp_btf: cause: refused: '-', though")
    assert lines[2].startswith("trace --attach tp_btf: cause: refused: '-', and the kernel's BTF")
    assert [v["verdict"] for v in report.verdicts] == [
        doctor_kit.UNAVAILABLE, doctor_kit.REFUSED, doctor_kit.REFUSED]


def test_exit_status_follows_the_verdicts():
    def status(*verdicts, strict=False):
        report = doctor_kit.Report(as_json=True)
        for v in verdicts:
            report._add("t", "c", v, "")
        return report.exit_status(strict)
    v, na, r = doctor_kit.VOUCHED, doctor_kit.UNAVAILABLE, doctor_kit.REFUSED
    assert status(v) == status(v, na) == status(v, strict=True) == 0
    assert status(v, na, strict=True) == status(v, r) == status(na) == status() == 1

"""`pagetrace doctor`, the tools' self-check, on the host's kernel: it
vouches for every column here, within 5 s; it vouches for nothing where it
cannot make a scratch file on a disk; and it refuses a tool that prints
wrong numbers (a wrapper that shifts the real tool's output by one page).
Ground truth is the doctor's own (mincore, cachestat(2), /proc/diskstats);
these tests check that its verdicts follow the numbers, both ways."""
import os
import subprocess
import sys
import textwrap
import time

import loopimg
from conftest import REPO

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
    assert done.returncode != 0
    assert "vouched" not in done.stdout
    assert "Read-only file system" in done.stderr and "nothing vouched" in done.stderr


def test_memory_file_system_vouches_nothing():
    loopimg.require_root()
    with loopimg.ram_mount("tmpfs") as mnt:
        done = doctor("--dir", mnt)
    assert done.returncode != 0
    assert "vouched" not in done.stdout
    assert "no block device" in done.stderr


# A wrapper of the real tool that prints its numbers off by one.
OFF_BY_ONE_TRACE = """
import subprocess, sys
args = sys.argv[1:]
rc = subprocess.call([{real!r}, *args])
out = args[args.index("-o") + 1]
lines = open(out).read().splitlines()
with open(out, "w") as f:
    for line in lines:
        fields = line.split(" ")
        if not line.startswith("#") and len(fields) > 2:
            fields[2] = str(int(fields[2]) + 4096)
        f.write(" ".join(fields) + "\\n")
sys.exit(rc)
"""
OFF_BY_ONE_CACHESTAT = """
import json, subprocess, sys
done = subprocess.run([{real!r}, *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
for line in done.stdout.splitlines():
    row = json.loads(line)
    row["misses"] += 1
    print(json.dumps(row))
sys.exit(done.returncode)
"""


def fake(tmp_path, name, body):
    path = tmp_path / name
    real = os.path.join(REPO, "tracer", name)
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body.format(real=real)))
    path.chmod(0o755)
    return str(path)


def test_trace_off_by_one_page_is_refused(tmp_path):
    loopimg.require_root()
    done = doctor("--tool", "trace", "--trace-binary",
                  fake(tmp_path, "trace", OFF_BY_ONE_TRACE))
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

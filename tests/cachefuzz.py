#!/usr/bin/env python3
"""Randomized differential test of every count cachetop and trace --used
print (issue 20), against ground truth from the kernel.

    cachefuzz.py run --seed N [--count K] [--fs ext4,xfs] --json OUT
    cachefuzz.py check OUT            (on the host: the comparator)
    cachefuzz.py show --seed N        (print the script of one seed)

`run` needs only the built tools (tracer/cachetop, tracer/trace,
tracer/cachestat) and the standard library, so it runs in a qemu guest
on another kernel; `check` (tests/cachefuzz_check.py) runs on the host and
needs the venv's pagetrace for `pagetrace waste --json`.

A seed gives one script (generate()): a few files of random sizes, a
read_ahead_kb, and steps drawn from read, pread, readv, preadv, mmap
touches, madvise (RANDOM, SEQUENTIAL, NORMAL, WILLNEED), fadvise
DONTNEED, re-reads, writes, and a child process doing some of them.
Scripts are batched: one fresh zram (or loop) filesystem per file system
type, all files of all scripts created, synced and evicted before the
tool starts, then one tool invocation runs `cachefuzz.py exec` over all
the scripts, each on its own files, so that the tool's per-file rows are
per script. The batch runs twice, under `cachetop -j -c` (with
`cachestat -j` beside it) and under `trace --used -c`, each on fresh files.
`exec --gate` prepares everything first and runs the steps between two
lines on stdin, touching no other file page then: a tool counting per
cgroup can watch exactly the steps (tests/test_containers.py).

What `exec` records is the kernel's view only (observe.py's words):
per step, the pages it accessed (a read call's pages, clamped to the file
size; a touch's page when /proc/self/pagemap shows it unmapped before),
the pages its faults mapped besides (pagemap after minus before), the
resident pages of every file of the script after the step (mincore), the
device's sectors read (/proc/diskstats) and, after a write, the file's
dirty pages (cachestat(2)). The counts the tools should print are derived
from that by tests/cachefuzz_check.py, never from the tools' code.
"""
import argparse
import contextlib
import ctypes
import ctypes.util
import functools
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = "cachefuzz"
FILESYSTEMS = ("ext4", "xfs")
# A script's file sizes, in pages: small ones often, up to 12 MiB, so that
# two pages can lie 7 MiB (28 chunks) apart as in issue 20.
MAX_FILE_PAGES = 3072
READ_AHEAD_KB = (0, 4, 16, 32, 128, 512, 2048)
# One file system per tool and batch: room for the files of 200 scripts
# (seeds 1-10,000 in batches of 200: 1.24 GiB at most, about 1 GiB mostly);
# zram stores only what is written, compressed.
FS_MIB = 4096
# Scripts per tool invocation: the matrix's 200 a file system in one (a
# batch's mkfs, loads and interpreter starts take 30 s in a TCG guest).
BATCH = 200


def fail(what, why):
    sys.stderr.write(f"{TOOL}: {what}: {why}\n")
    sys.exit(1)


# ------------------------------------------------------------------
# The generator

def _span(rng, npages, size):
    """A random byte range (offset, length) of a file of @size bytes:
    aligned or not, sometimes reaching past the end, sometimes empty."""
    limit = max(size, 1)
    kind = rng.random()
    if kind < 0.1:
        return rng.randrange(limit + 3 * PAGE), rng.randrange(2 * PAGE)
    if kind < 0.4:
        first = rng.randrange(max(npages, 1))
        return first * PAGE, rng.randint(1, 64) * PAGE
    offset = rng.randrange(limit)
    length = int(rng.choice((1, PAGE, 16 * PAGE, 256 * PAGE)) * rng.random()) + 1
    return offset, length


def _step(rng, files, state, in_child=False):
    """One step of a script; @state: per file, whether a DONTNEED was done
    (then no write follows: see `write` below) and the reads done."""
    f = rng.randrange(len(files))
    size = files[f]
    npages = (size + PAGE - 1) // PAGE
    ops = ["read", "pread", "readv", "preadv", "touch", "touch", "madvise",
           "willneed", "dontneed", "write"]
    if state["reads"]:
        ops.append("reread")
    if not in_child:
        ops.append("child")
    op = rng.choice(ops)
    if op == "reread":
        return dict(rng.choice(state["reads"]))
    if op in ("read", "pread"):
        offset, length = _span(rng, npages, size)
        step = {"op": op, "file": f, "offset": offset, "length": length}
    elif op in ("readv", "preadv"):
        offset, length = _span(rng, npages, size)
        n = rng.randint(1, 8)
        cuts = sorted(rng.randrange(length + 1) for _ in range(n - 1))
        vectors = [b - a for a, b in zip([0, *cuts], [*cuts, length])]
        step = {"op": op, "file": f, "offset": offset, "vectors": vectors}
    elif op == "touch":
        if not npages:
            return {"op": "pread", "file": f, "offset": 0, "length": 1}
        n = rng.randint(1, 8)
        if rng.random() < 0.5:
            pages = [rng.randrange(npages) for _ in range(n)]
        else:   # far apart, as in issue 20
            start, gap = rng.randrange(npages), rng.choice((1, 16, 64, 1792, 2048))
            pages = [(start + i * gap) % npages for i in range(n)]
        return {"op": "touch", "file": f, "pages": pages}
    elif op == "madvise":
        return {"op": "madvise", "file": f,
                "advice": rng.choice(("random", "random", "sequential", "normal"))}
    elif op == "willneed":
        first = rng.randrange(max(npages, 1))
        return {"op": "willneed", "file": f, "first": first,
                "pages": rng.randint(1, max(1, min(256, npages - first)))}
    elif op == "dontneed":
        state["evicted"].add(f)
        if rng.random() < 0.3:
            return {"op": "dontneed", "file": f, "offset": 0, "length": 0}
        offset, length = _span(rng, npages, size)
        return {"op": "dontneed", "file": f, "offset": offset, "length": length}
    elif op == "write":
        # Whole pages inside the file: no read-modify-write, no new size.
        # Never on a file that had a DONTNEED: a page evicted unaccessed
        # and then recreated by a write counts as a miss when read
        # (docs/tracer.md, known limits), which this test does not judge.
        whole = size // PAGE
        if not whole or f in state["evicted"]:
            return {"op": "pread", "file": f, "offset": 0, "length": size}
        first = rng.randrange(whole)
        return {"op": "write", "file": f, "first": first,
                "pages": rng.randint(1, min(16, whole - first))}
    else:   # child
        return {"op": "child",
                "steps": [_step(rng, files, state, in_child=True)
                          for _ in range(rng.randint(1, 3))]}
    state["reads"].append(step)
    return step


def generate(seed):
    """The script of @seed: {"seed", "read_ahead_kb", "files": [size],
    "steps": [...]}. The same seed gives the same script everywhere."""
    rng = random.Random(seed)
    files = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.1:
            files.append(rng.randint(0, PAGE + 1))
        elif kind < 0.6:
            files.append(rng.randint(1, 96 * PAGE))
        else:
            files.append(rng.randint(1, MAX_FILE_PAGES * PAGE))
    state = {"evicted": set(), "reads": []}
    steps = [_step(rng, files, state) for _ in range(rng.randint(1, 10))]
    return {"seed": seed, "read_ahead_kb": rng.choice(READ_AHEAD_KB),
            "files": files, "steps": steps}


# ------------------------------------------------------------------
# The kernel's view: mincore, pagemap, diskstats, cachestat

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace import cache  # noqa: E402  (its standard-library core)

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
MAP_FAILED = ctypes.c_void_p(-1).value
PROT_READ, MAP_SHARED = 1, 1
MADVICE = {"normal": 0, "random": 1, "sequential": 2, "willneed": 3}


def _mmap(fd, length):
    """The script's own mapping (pagetrace.cache's is gone once mincore
    has looked)."""
    addr = _libc.mmap(None, ctypes.c_size_t(length), PROT_READ, MAP_SHARED, fd,
                      ctypes.c_long(0))
    if addr in (None, MAP_FAILED):
        raise OSError(ctypes.get_errno(), "mmap")
    return addr


def _madvise(addr, length, advice):
    if _libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(length), advice):
        raise OSError(ctypes.get_errno(), "madvise")


# A pagemap entry's last byte with its bit 7 (the entry's bit 63, present) set.
_PRESENT = re.compile(b"[\x80-\xff]")


def _proc_fd(path):
    """@path, opened once by this process: the steps read the same /proc
    files thousands of times. Per process: a child's /proc/self is its own."""
    return _proc_fd_of(path, os.getpid())


@functools.lru_cache(maxsize=None)
def _proc_fd_of(path, pid):
    return os.open(path, os.O_RDONLY)


def _proc_text(path):
    """The whole of a /proc file, read again from its start."""
    fd, chunks, at = _proc_fd(path), [], 0
    while True:
        chunk = os.pread(fd, 1 << 16, at)
        if not chunk:
            return b"".join(chunks).decode()
        chunks.append(chunk)
        at += len(chunk)


def ranges(pages):
    """Pages as [[first, end), ...]: residency of a big file is a few runs,
    not thousands of numbers."""
    return [list(run) for run in cache.runs_of_pages(sorted(pages))]


def unranges(runs):
    return {p for first, end in runs for p in range(first, end)}


class File:
    """One file of a script, open for reading and writing, and once needed
    the script's own mapping of it (shared with a child)."""

    def __init__(self, path):
        self.path = path
        self.size = os.path.getsize(path)
        self.npages = (self.size + PAGE - 1) // PAGE
        self.fd = os.open(path, os.O_RDWR)
        self.mapping = None

    def resident(self):
        """[[first, end), ...] resident, by mincore(2) through a mapping of
        its own that touches nothing."""
        return [list(run) for run in cache.runs_in_vector(
            cache.mincore_vector(self.fd, self.size))]

    def mapped(self):
        """The script mapping's pages in this process's page tables: those
        whose pagemap entry (8 bytes, little-endian) has bit 63 set."""
        if self.mapping is None:
            return set()
        entries = os.pread(_proc_fd("/proc/self/pagemap"), 8 * self.npages,
                           self.mapping // PAGE * 8)
        return {m.start() for m in _PRESENT.finditer(entries[7::8])}

    def map(self):
        if self.mapping is None and self.size:
            self.mapping = _mmap(self.fd, self.size)
        return self.mapping

    def dirty_pages(self):
        """Dirty or under writeback, by cachestat(2); None without it."""
        if not cache.cachestat_available():
            return None
        stat = cache.cachestat(self.fd)
        return stat.dirty + stat.writeback

    def close(self):
        if self.mapping is not None:
            _libc.munmap(ctypes.c_void_p(self.mapping), ctypes.c_size_t(self.size))
        os.close(self.fd)


def sectors_read(device):
    name = os.path.basename(device)
    for line in _proc_text("/proc/diskstats").splitlines():
        fields = line.split()
        if fields[2] == name:
            # Wait for reads in flight (a loop device completes them
            # later; zram at once) so that bytes match residency.
            return int(fields[5]), int(fields[11])
    raise OSError(f"{device} not in /proc/diskstats")


def collapses():
    """Huge pages khugepaged (or MADV_COLLAPSE) has begun to collapse
    (/proc/vmstat thp_collapse_alloc; 0 without THP). A collapse of a
    mapped file's 2 MiB block reads the block's missing pages in
    khugepaged's own context: device reads that are not the script's
    (Debian's 7.3 runs THP "always": tests/cachefuzz_check.py)."""
    found = re.search(r"^thp_collapse_alloc (\d+)$", _proc_text("/proc/vmstat"), re.M)
    return int(found.group(1)) if found else 0


@functools.lru_cache(maxsize=None)
def _khugepaged_io():
    """/proc/PID/io of the khugepaged kernel thread, or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "khugepaged":
                    return f"/proc/{pid}/io"
        except OSError:
            continue
    return None


def khugepaged_reads():
    """Bytes khugepaged has read from storage (/proc/PID/io read_bytes of
    the kernel thread; 0 without one). A collapse that reads a block's
    missing pages and then gives up, or one to a smaller order (7.3 has
    per-size collapse counters), leaves thp_collapse_alloc alone: 7.3's
    seed 1217 read the 128 pages from a 2 MiB block's first missing page
    on (read_ahead_kb 512) with no collapse counted, and no traced task
    read them."""
    path = _khugepaged_io()
    if path is None:
        return 0
    found = re.search(r"^read_bytes: (\d+)$", _proc_text(path), re.M)
    return int(found.group(1)) if found else 0


def device_sectors(device):
    for _ in range(1000):
        sectors, in_flight = sectors_read(device)
        if not in_flight:
            return sectors
        time.sleep(0.001)
    return sectors


# ------------------------------------------------------------------
# exec: the script, run under the tool

def _clamped_pages(f, offset, length):
    """The pages a read call of @length bytes at @offset accesses: its
    range clamped to the file (mm_filemap_get_pages' words)."""
    if length <= 0 or offset >= f.size:
        return []
    last = min(offset + length, f.size) - 1
    return list(range(offset // PAGE, last // PAGE + 1))


def _do(step, files, device, log):
    """Runs one step; appends its observations to @log."""
    op = step["op"]
    if op == "child":   # forked now, or before (exec --gate)
        return (step.get("forked") or Child(step, files, device)).join(log)
    f = files[step["file"]]
    seen = {"op": op, "file": step["file"], "pid": os.getpid(),
            "accessed": []}
    before = device_sectors(device)
    collapses_before, khugepaged_before = collapses(), khugepaged_reads()
    if op in ("read", "readv"):
        os.lseek(f.fd, step["offset"], os.SEEK_SET)
    if op in ("read", "pread"):
        got = (os.read(f.fd, step["length"]) if op == "read" else
               os.pread(f.fd, step["length"], step["offset"]))
        length = step["length"]
    elif op in ("readv", "preadv"):
        buffers = [bytearray(n) for n in step["vectors"]]
        got = (os.readv(f.fd, buffers) if op == "readv" else
               os.preadv(f.fd, buffers, step["offset"]))
        length = sum(step["vectors"])
    if op in ("read", "pread", "readv", "preadv"):
        # A call with nothing to read (0 bytes asked) makes no access.
        seen["accessed"] = _clamped_pages(f, step["offset"], length) if length else []
        seen["returned"] = got if isinstance(got, int) else len(got)
    elif op == "touch":
        # Per touch, in order: [page, faulted, pages the fault mapped besides].
        addr = f.map()
        seen["touches"], seen["va"] = [], addr
        for page in step["pages"]:
            mapped = f.mapped()
            ctypes.string_at(addr + page * PAGE, 1)
            now = f.mapped()
            faulted = page not in mapped    # a fault: one access
            if faulted:
                seen["accessed"].append(page)
            seen["touches"].append([page, faulted, sorted(now - mapped - {page})])
    elif op == "madvise":
        if f.map():
            _madvise(f.mapping, f.size, MADVICE[step["advice"]])
    elif op == "willneed":
        if f.map():
            _madvise(f.mapping + step["first"] * PAGE, step["pages"] * PAGE,
                     MADVICE["willneed"])
    elif op == "dontneed":
        os.posix_fadvise(f.fd, step["offset"], step["length"], os.POSIX_FADV_DONTNEED)
    elif op == "write":
        seen["dirty_before"] = f.dirty_pages()
        block = bytes((step["first"] + i) & 0xff for i in range(PAGE))
        os.pwrite(f.fd, block * step["pages"], step["first"] * PAGE)
        seen["written"] = list(range(step["first"], step["first"] + step["pages"]))
        seen["dirty"] = f.dirty_pages()
        os.fsync(f.fd)
    seen["sectors"] = device_sectors(device) - before
    seen["collapses"] = collapses() - collapses_before
    seen["khugepaged_reads"] = khugepaged_reads() - khugepaged_before
    seen["resident"] = [g.resident() for g in files]
    log.append(seen)


class Child:
    """The process of a child step, forked at once. Gated (exec --gate:
    @gate, the scripts' mappings), it pins its code (pin_code()) and waits
    for join() before it runs its steps: they fault on no page but theirs."""
    _parent_fds = []    # the other children's pipe ends, closed in a new one

    def __init__(self, step, files, device, gate=None):
        reader, writer = os.pipe()
        go_reader, self.go = os.pipe() if gate else (None, None)
        self.pid = os.fork()
        if self.pid == 0:
            for fd in [reader, self.go, *Child._parent_fds]:
                if fd is not None:
                    os.close(fd)
            code = 0
            try:
                if gate:
                    pin_code(gate)
                    if os.read(go_reader, 1) != b"g":   # the parent is gone
                        os._exit(1)
                mine = []
                for sub in step["steps"]:
                    _do(sub, files, device, mine)
                os.write(writer, json.dumps(mine).encode())
            except BaseException as err:  # noqa: B902 (reported by the parent)
                os.write(writer, json.dumps({"error": repr(err)}).encode())
                code = 1
            os._exit(code)
        os.close(writer)
        if gate:
            os.close(go_reader)
            Child._parent_fds.append(self.go)
        self.reader = reader
        Child._parent_fds.append(reader)

    def join(self, log):
        """Runs the steps (a gated child: now) and appends what it saw to @log."""
        if self.go is not None:
            os.write(self.go, b"g")
        chunks = []
        while True:
            chunk = os.read(self.reader, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        for fd in (self.reader, self.go):
            if fd is not None:
                os.close(fd)
                Child._parent_fds.remove(fd)
        _, status = os.waitpid(self.pid, 0)
        got = json.loads(b"".join(chunks) or b"{}")
        if status or not isinstance(got, list):
            raise RuntimeError(f"child: {got.get('error', 'exit status %d' % status)}")
        for seen in got:
            seen["child"] = True
        log += got


def pin_code(skip):
    """mlock(2) every file mapping of this process but those at @skip (the
    scripts' own): the interpreter's and the libraries' pages, populated
    now and kept, so that running code later faults on no file page."""
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/") or fields[1].startswith("---"):
            continue
        start, end = (int(a, 16) for a in fields[0].split("-"))
        if start not in skip and _libc.mlock(ctypes.c_void_p(start),
                                             ctypes.c_size_t(end - start)):
            raise OSError(ctypes.get_errno(), f"mlock {fields[5]}")


def _open_script(script, knob):
    with open(knob, "w") as f:   # before the files are opened: f_ra
        f.write(str(script["read_ahead_kb"]))
    return [File(p) for p in script["paths"]]


def _prepared(scripts, knob, device):
    """exec --gate's setup: what the steps look up once (khugepaged's pid,
    cachestat(2)) looked up, every script's files opened and mapped, every
    child step's process forked, this process's code pinned: after it, the
    steps read no page of any file but the scripts'. A child has the
    mappings as they were then: a madvise of the parent's before its step
    is not in its copy (the kernel's view, which the checks read, is still
    the child's own)."""
    collapses(), khugepaged_reads(), cache.cachestat_available(), device_sectors(device)
    opened = [_open_script(s, knob) for s in scripts]
    mappings = {f.map() for files in opened for f in files}
    for script, files in zip(scripts, opened):
        for step in script["steps"]:
            if step["op"] == "child":
                step["forked"] = Child(step, files, device, gate=mappings)
    pin_code(mappings)
    return opened


def _gate(word):
    """Says @word on stdout, then waits for a line on stdin."""
    sys.stdout.write(word + "\n")
    sys.stdout.flush()
    if not sys.stdin.readline():
        fail("exec --gate", "stdin closed before the go")


def exec_plan(plan_path, out_path, gate=False):
    """`exec`: every script of the plan in turn, each on its own files.
    With @gate, everything is prepared first (_prepared()), then "ready" is
    said and a line awaited before the first step, and "done" and a line
    after the last: between the two lines this process and its children
    touch no file page but the scripts' (a tool's interval may be exactly
    that: tests/test_containers.py)."""
    with open(plan_path) as f:
        plan = json.load(f)
    device, knob = plan["device"], plan["read_ahead_knob"]
    opened = _prepared(plan["scripts"], knob, device) if gate else None
    if gate:
        _gate("ready")
    results = []
    for i, script in enumerate(plan["scripts"]):
        files = opened[i] if gate else _open_script(script, knob)
        log = [{"op": "start", "sectors": 0,
                "resident": [g.resident() for g in files]}]
        try:
            for step in script["steps"]:
                _do(step, files, device, log)
        finally:
            if not gate:
                for g in files:
                    g.close()
        results.append({"seed": script["seed"], "log": log})
    if gate:
        _gate("done")
        for g in (g for files in opened for g in files):
            g.close()
    with open(out_path, "w") as f:
        json.dump(results, f)


# ------------------------------------------------------------------
# run: fresh filesystems, the files, the tools

def _run(*cmd, **kw):
    kw.setdefault("check", True)
    kw.setdefault("capture_output", True)
    try:
        return subprocess.run(cmd, text=True, **kw)
    except subprocess.CalledProcessError as err:
        fail(" ".join(cmd), (err.stderr or "").strip() or f"exit status {err.returncode}")


def _new_zram(size_mib):
    """A free zram device of @size_mib, or None (no zramctl, no module)."""
    if not shutil.which("zramctl"):
        return None
    if not os.path.exists("/sys/class/zram-control"):
        subprocess.run(["modprobe", "zram"], capture_output=True)
    found = subprocess.run(["zramctl", "--find", "--size", f"{size_mib}M"],
                           capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


@contextlib.contextmanager
def fresh_filesystem(fstype, size_mib=FS_MIB, workdir=None, kind="auto"):
    """A fresh @fstype on a new zram device, or (@kind "loop", or "auto"
    without zram) a loop device over a file in @workdir, mounted; yields
    (mountpoint, device). Everything is undone on exit, even after an error."""
    scratch = tempfile.mkdtemp(prefix="cachefuzz-", dir=workdir)
    mountpoint = os.path.join(scratch, "mnt")
    os.mkdir(mountpoint)
    device, is_zram, mounted = None, False, False
    try:
        if kind != "loop":
            device = _new_zram(size_mib)
            is_zram = device is not None
            if kind == "zram" and not is_zram:
                fail("zram", "no zram device (zramctl --find failed)")
        if device is None:
            image = os.path.join(scratch, "fs.img")
            with open(image, "wb") as f:
                f.truncate(size_mib << 20)
            device = _run("losetup", "--find", "--show", image).stdout.strip()
        _run(f"mkfs.{fstype}", *(("-q", "-f") if fstype == "xfs" else ("-q",)), device)
        _run("mount", device, mountpoint)
        mounted = True
        yield mountpoint, device
    finally:
        if mounted and _run("umount", mountpoint, check=False).returncode:
            _run("umount", "-l", mountpoint, check=False)
        if device and is_zram:
            _reset_zram(device)
        elif device:
            _run("losetup", "-d", device, check=False)
        shutil.rmtree(scratch, ignore_errors=True)


def _reset_zram(device):
    """zramctl --reset, retried: after umount the device stays busy for a
    while (udev's probes; seen: 10 devices left over in 60 batches, and
    4 in 60 more with 5 s of retries, on a loaded machine)."""
    if shutil.which("udevadm"):
        _run("udevadm", "settle", "--timeout=30", check=False)
    for _ in range(600):
        if _run("zramctl", "--reset", device, check=False).returncode == 0:
            return
        time.sleep(0.1)
    sys.stderr.write(f"{TOOL}: {device}: still busy, not reset (zramctl --reset {device})\n")
    LEFT_BEHIND.append(device)


# Devices that could not be reset (cause unknown: the file system was
# unmounted and nothing in user space held them); in the report, and
# reset again before `run` ends.
LEFT_BEHIND = []


def read_ahead_knob(device):
    return f"/sys/block/{os.path.basename(device)}/queue/read_ahead_kb"


def evict(path):
    """Synced and dropped, checked (pagetrace.cache: cachestat(2) or mincore)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        result = cache.evict_fd(fd, path, cache.choose_method()[0])
    finally:
        os.close(fd)
    if result["status"] not in ("evicted", "unverified"):
        fail(path, f"not evicted: {result}")


def create_files(scripts, where):
    """Each script's files, written, synced and evicted: cold at its start."""
    # 64 random bytes at the head of each page, zeros after: never a
    # same-filled page (zram would keep none), and compressed to little,
    # so that a batch costs zram tens of MiB, not its size.
    pattern = b"".join(os.urandom(64) + bytes(PAGE - 64) for _ in range(16))
    planned = []
    for script in scripts:
        directory = os.path.join(where, f"s{script['seed']}")
        os.mkdir(directory)
        paths = []
        for i, size in enumerate(script["files"]):
            path = os.path.join(directory, f"f{i}")
            with open(path, "wb") as f:
                for offset in range(0, size, len(pattern)):
                    f.write(pattern[: min(len(pattern), size - offset)])
            paths.append(path)
        planned.append({**script, "paths": paths})
    os.sync()
    for script in planned:
        for path in script["paths"]:
            evict(path)
    return planned


def _exec_command(plan, out):
    return " ".join([sys.executable, os.path.abspath(__file__), "exec", plan, out])


class Cachestat:
    """tracer/cachestat -j beside a run: started, seen to print once (so it
    is attached), its lines read as they come (a run longer than the pipe
    holds would otherwise block its writes and delay its stop), stopped
    with SIGINT (which prints the last interval)."""

    def __init__(self, tools):
        self.proc = subprocess.Popen([os.path.join(tools, "cachestat"), "-j", "0.2"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = [self.proc.stdout.readline()]
        if not self.lines[0]:
            fail("cachestat", self.proc.stderr.read().strip() or "printed nothing")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("cachestat", "did not stop within 30 s of SIGINT")
        self.reader.join(timeout=30)
        err = self.proc.stderr.read()
        if self.proc.returncode:
            fail("cachestat", err.strip() or f"exit status {self.proc.returncode}")
        rows = [json.loads(line) for line in self.lines if line.strip()]
        return {key: sum(r[key] for r in rows)
                for key in ("hits", "misses", "dirties", "mapped", "lost")}


def run_batch(scripts, fstype, tools, scratch, kind="auto"):
    """Both tools over @scripts, each on a fresh @fstype; the raw results."""
    result = {"fs": fstype}
    for tool in ("cachetop", "trace"):
        started = time.monotonic()
        with fresh_filesystem(fstype, workdir=scratch, kind=kind) as (mountpoint, device):
            where = os.path.join(mountpoint, tool)
            os.mkdir(where)
            planned = create_files(scripts, where)
            made = time.monotonic()
            plan = os.path.join(scratch, f"plan-{fstype}-{tool}.json")
            seen = os.path.join(scratch, f"seen-{fstype}-{tool}.json")
            with open(plan, "w") as f:
                json.dump({"device": device, "read_ahead_knob": read_ahead_knob(device),
                           "scripts": planned}, f)
            command = _exec_command(plan, seen)
            if tool == "cachetop":
                beside = Cachestat(tools)
                try:
                    proc = subprocess.run([os.path.join(tools, "cachetop"), "-j", "-c",
                                           command], capture_output=True, text=True)
                finally:
                    result["cachestat"] = beside.stop()
            else:
                log = os.path.join(scratch, f"trace-{fstype}.log")
                proc = subprocess.run([os.path.join(tools, "trace"), "--used", "-o", log,
                                       "-c", command], capture_output=True, text=True)
                result["trace_log"] = log
            if proc.returncode:
                fail(f"{tool} -c cachefuzz.py exec ({fstype})",
                     proc.stderr.strip() or f"exit status {proc.returncode}")
            if tool == "cachetop":
                result["cachetop"] = json.loads(proc.stdout)
            else:
                result["trace_stderr"] = proc.stderr
            with open(seen) as f:
                result[f"{tool}_seen"] = json.load(f)
            result[f"{tool}_paths"] = {s["seed"]: s["paths"] for s in planned}
            result[f"{tool}_device"] = device
        sys.stderr.write(f" [files {made - started:.1f} s, {tool} {time.monotonic() - made:.1f} s]")
        sys.stderr.flush()
    return result


def fault_around_bytes():
    """The kernel's fault_around_bytes, read in a mount namespace of our own
    (debugfs is not mounted here, and others' tests want it so); None if
    it cannot be read."""
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           "mount -t debugfs debugfs /sys/kernel/debug && "
                           "cat /sys/kernel/debug/fault_around_bytes"],
                          capture_output=True, text=True)
    return int(proc.stdout) if proc.returncode == 0 and proc.stdout.strip().isdigit() else None


def fault_around_range(va, page, npages, nr_pages):
    """The pages [first, last] do_fault_around() (mm/memory.c) hands
    filemap_map_pages() for a fault on @page of a mapping at @va of
    @npages pages from file page 0: @nr_pages aligned in the page table,
    inside the mapping and the page table."""
    ptrs_per_pte = 512 if PAGE == 4096 else PAGE // 8
    pte_off = ((va >> PAGE.bit_length() - 1) + page) % ptrs_per_pte
    from_pte = max(pte_off - pte_off % nr_pages, pte_off - min(pte_off, page))
    to_pte = min(from_pte + nr_pages, ptrs_per_pte, pte_off + npages - page) - 1
    return page - (pte_off - from_pte), page + (to_pte - pte_off)


def cmd_run(args):
    # A kill (the kernel matrix's timeout) unmounts and frees the device too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"{TOOL}: terminated"))
    if os.geteuid() != 0:
        fail("run", "needs root (BPF, zram or loop devices, mounts)")
    tools = args.tools or os.path.join(REPO, "tracer")
    for name in ("cachetop", "trace", "cachestat"):
        if not os.access(os.path.join(tools, name), os.X_OK):
            fail(os.path.join(tools, name), "not built (run make)")
    # A kernel the tools refuse, before any file is written (a batch's
    # files take a minute to write in a TCG guest): cachestat says why.
    Cachestat(tools).stop()
    out = os.path.abspath(args.json)
    scratch = args.scratch or os.path.dirname(out)
    seeds = list(range(args.seed, args.seed + args.count))
    report = {"kernel": platform.release(), "seeds": [seeds[0], seeds[-1]],
              "page_size": PAGE, "fault_around_bytes": fault_around_bytes(),
              "cachestat": cache.cachestat_available(), "batches": []}
    for fstype in args.fs.split(","):
        for at in range(0, len(seeds), args.batch):
            batch = [generate(s) for s in seeds[at: at + args.batch]]
            started = time.monotonic()
            sys.stderr.write(f"{TOOL}: {fstype}: seeds {batch[0]['seed']}-"
                             f"{batch[-1]['seed']} ...")
            sys.stderr.flush()
            tag = f"{fstype}-{batch[0]['seed']}"
            subdir = os.path.join(scratch, f"{os.path.basename(out)}.{tag}")
            os.makedirs(subdir, exist_ok=True)
            result = run_batch(batch, fstype, tools, subdir, args.device)
            # Relative to OUT: the host may see the guest's scratch elsewhere.
            result["trace_log"] = os.path.relpath(result["trace_log"], os.path.dirname(out))
            result["seeds"] = [batch[0]["seed"], batch[-1]["seed"]]
            report["batches"].append(result)
            sys.stderr.write(f" {time.monotonic() - started:.1f} s\n")
    for device in list(LEFT_BEHIND):
        LEFT_BEHIND.remove(device)
        _reset_zram(device)
    report["left_behind"] = LEFT_BEHIND
    with open(out, "w") as f:
        json.dump(report, f)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="cachefuzz.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  sudo tests/cachefuzz.py run --seed 1 --count 200 --json /tmp/fuzz.json
  tests/cachefuzz_check.py /tmp/fuzz.json        # compare (host, venv)
  tests/cachefuzz.py show --seed 17              # the script of seed 17""")
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("run", help="run scripts under the tools (root; stdlib only)")
    p.add_argument("--seed", type=int, required=True, help="first seed")
    p.add_argument("--count", type=int, default=1, help="scripts (default 1)")
    p.add_argument("--batch", type=int, default=BATCH,
                   help=f"scripts per tool invocation and filesystem (default {BATCH})")
    p.add_argument("--fs", default=",".join(FILESYSTEMS),
                   help="file system types, comma-separated (default ext4,xfs)")
    p.add_argument("--json", required=True, metavar="OUT", help="results file")
    p.add_argument("--device", choices=("auto", "zram", "loop"), default="auto",
                   help="block device under the file systems (default: zram if "
                   "there is one, else loop)")
    p.add_argument("--tools", help="directory of cachetop, trace, cachestat "
                   "(default: tracer/ of this tree)")
    p.add_argument("--scratch", help="directory for plans and traces "
                   "(default: OUT's)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("exec", help=argparse.SUPPRESS)
    p.add_argument("--gate", action="store_true",
                   help='prepare, say "ready", wait for a line; run; say "done", wait')
    p.add_argument("plan")
    p.add_argument("out")
    p.set_defaults(func=lambda a: exec_plan(a.plan, a.out, a.gate))
    p = sub.add_parser("show", help="print the script of a seed")
    p.add_argument("--seed", type=int, required=True)
    p.set_defaults(func=lambda a: print(json.dumps(generate(a.seed), indent=1)))
    args = parser.parse_args(argv)
    if getattr(args, "count", 1) < 1 or getattr(args, "batch", 1) < 1:
        parser.error("--count and --batch must be at least 1")
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())

"""`pagetrace doctor`'s means (tools/doctor.py): the scratch file and its
ground truth (mincore, cachestat(2), /proc/diskstats), the reading process,
a C tool started in the background, the report of verdicts, and what the
running kernel lacks, read from its BTF. Standard library only.

A verdict is one of three:
  vouched                       the column equals the kernel's own account;
  not available on this kernel  the kernel lacks what the column (or the
                                whole tool) needs, and its BTF agrees where
                                the tool names a tracepoint, a function or
                                a BPF helper: nothing is vouched for;
  refused                       a wrong number, a tool that does not load
                                where the kernel has what it needs, or a
                                check that could not be made.
"""
import functools
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from pagetrace.tools import pagecache

PAGE = os.sysconf("SC_PAGE_SIZE")
PAGES = 64

VOUCHED = "vouched"
UNAVAILABLE = "not available on this kernel"
REFUSED = "refused"

# The reader: told by one line on stdin what to do, answers one line each.
READER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
print("ready", flush=True)
for line in sys.stdin:
    what = line.strip()
    if what == "willneed":
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
    if what == "warm":
        os.pread(os.open(sys.executable, os.O_RDONLY), 4096, 0)
    if what in ("willneed", "read"):
        done = 0
        while done < size:
            done += len(os.pread(fd, size - done, done))
    print("done", flush=True)
    if what == "exit":
        break
"""


class CantCheck(Exception):
    """Nothing can be vouched for: why."""


def cached_pages(path):
    """The set of the file's page indexes in the page cache (mincore)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        vec = pagecache.mincore_vector(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return {i for i, b in enumerate(vec) if b}


def syscall_cachestat(path):
    """cachestat(2)'s count of the file's cached pages, or None without it."""
    if not pagecache.cachestat_available():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        return pagecache.cachestat(fd).cached
    finally:
        os.close(fd)


def evict(path):
    """`pagetrace cache evict` of the scratch file; mincore must agree."""
    fd = os.open(path, os.O_RDONLY)
    try:
        result = pagecache.evict_fd(fd, path, pagecache.METHOD_MINCORE)
    finally:
        os.close(fd)
    left = cached_pages(path)
    if result["status"] != "evicted" or left:
        raise CantCheck(f"{len(left)} pages of the scratch file stay cached "
                        f"after eviction ({result['status']})")


def sectors_read(dev):
    """Sectors read so far on device DEV (st_dev), from /proc/diskstats."""
    major, minor = os.major(dev), os.minor(dev)
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if int(fields[0]) == major and int(fields[1]) == minor:
                return int(fields[5])
    return None


def make_scratch(parent):
    """A directory and a file of PAGES pages on a disk file system."""
    try:
        d = tempfile.mkdtemp(prefix="pagetrace-doctor.", dir=parent)
    except OSError as e:
        raise CantCheck(f"cannot make a scratch directory in {parent}: "
                        f"{e.strerror}") from None
    path = os.path.join(d, "scratch")
    try:
        with open(path, "wb") as f:
            f.write(os.urandom(PAGES * PAGE))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        shutil.rmtree(d, ignore_errors=True)
        raise CantCheck(f"cannot write a scratch file in {parent}: "
                        f"{e.strerror}") from None
    if sectors_read(os.stat(path).st_dev) is None:
        shutil.rmtree(d, ignore_errors=True)
        raise CantCheck(f"{parent} is on no block device of /proc/diskstats "
                        "(tmpfs?): pick a disk file system with --dir")
    return d, path


class Reader:
    """The reading process, started idle (its imports done)."""

    def __init__(self, path):
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", READER, path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self._expect("ready")
        self.pid = self.proc.pid
        # Its code paths run once before any tool counts them.
        self.do("warm")

    def _expect(self, word):
        line = self.proc.stdout.readline().strip()
        if line != word:
            raise CantCheck(f"the reader said {line!r}, not {word!r}")

    def do(self, what):
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        self._expect("done")

    def close(self):
        if self.proc.poll() is None:
            try:
                self.do("exit")
            except (CantCheck, OSError):
                self.proc.kill()
        self.proc.wait()


class Tool:
    """A C tool started in the background; ready once it says so."""

    def __init__(self, argv):
        self.argv = argv
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.PIPE,
                                     text=True)
        self.err = []
        self.ready_at = None
        self.timed_out = False

    def wait_ready(self, deadline):
        self.timed_out = True
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stderr.readline()
            if not line:
                self.timed_out = False
                break
            self.err.append(line.rstrip("\n"))
            if "Tracing..." in line:
                self.ready_at = time.monotonic()
                return True
        return False

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait()
        self.err += self.proc.stderr.read().splitlines()
        self.out.seek(0)
        return self.out.read()

    def errors(self):
        """Its error lines, but the one that says it is ready."""
        return [l for l in self.err if l.strip() and "Tracing..." not in l]

    def why_not(self):
        if self.ready_at is None and self.timed_out:
            return "not ready within --timeout (loading its programs took longer)"
        lines = self.errors()
        return lines[-1] if lines else f"exit status {self.proc.returncode}"


class Report:
    """The verdicts, one line each on stdout as they come (or, with
    as_json, one JSON document at the end: write_json)."""

    def __init__(self, as_json=False):
        self.verdicts = []
        self.as_json = as_json

    def _add(self, tool, column, verdict, detail):
        self.verdicts.append({"tool": tool, "column": column, "verdict": verdict,
                              "detail": detail})
        if self.as_json:
            return
        text = verdict + (f" ({detail})" if verdict == VOUCHED and detail else
                          f": {detail}" if verdict != VOUCHED else "")
        print(f"{tool}: {column}: {text}", flush=True)

    def say(self, tool, column, why_refused, vouched_how=""):
        if why_refused:
            self._add(tool, column, REFUSED, why_refused)
        else:
            self._add(tool, column, VOUCHED, vouched_how)

    def unavailable(self, tool, column, why):
        self._add(tool, column, UNAVAILABLE, why)

    def refuse_all(self, tool, why):
        self.say(tool, "all columns", why)

    def count(self, verdict):
        return sum(v["verdict"] == verdict for v in self.verdicts)

    def exit_status(self, strict):
        """0 when every number printed is right and one at least was
        (strict: and nothing was not available); 1 otherwise."""
        if self.count(REFUSED) or not self.count(VOUCHED):
            return 1
        return 1 if strict and self.count(UNAVAILABLE) else 0

    def write_json(self, out, strict, seconds, error=None):
        status = 2 if error else self.exit_status(strict)
        json.dump({"release": os.uname().release, "strict": strict,
                   "vouched": self.count(VOUCHED), "not_available": self.count(UNAVAILABLE),
                   "refused": self.count(REFUSED), "exit_status": status,
                   "seconds": round(seconds, 1), "error": error,
                   "verdicts": self.verdicts}, out, indent=1)
        out.write("\n")


def start_failure(report, name, tool, hint=""):
    """A tool that did not become ready: not available on this kernel when
    every error line names what the kernel lacks and the kernel's BTF does
    not say otherwise; refused otherwise (it does not load where it should,
    or it timed out)."""
    lines = tool.errors()
    contradicted = [l for l in lines if kernel_has_what(l)]
    if tool.ready_at is None and tool.timed_out or not lines or contradicted \
            or not all(LACKS.search(l) for l in lines):
        why = tool.why_not()
        if contradicted:
            why = f"{contradicted[0]}: yet the kernel's BTF has it"
        return report.refuse_all(name, f"it did not start: {why}{hint}")
    unchecked = [l for l in lines if kernel_has_what(l) is None]
    return report.unavailable(name, "all columns", "it does not start: " + " / ".join(lines)
                              + (" (the tool's word: not in the BTF to check)"
                                 if unchecked else ""))


# ----- what the kernel lacks, from its BTF -----

KERNEL_BTF = "/sys/kernel/btf/vmlinux"
LACKS = re.compile(r"\blacks\b")
LACKS_TRACEPOINT = re.compile(r"kernel lacks tracepoint (\w+):(\w+)"
                              r"(, nor its function in BTF for fentry)?")
LACKS_BPF_LOOP = re.compile(r"kernel lacks bpf_loop\b")
BTF_KIND_ENUM, BTF_KIND_TYPEDEF, BTF_KIND_FUNC = 6, 8, 12
# The bytes that follow each kind's 12-byte struct btf_type, by its vlen
# (include/uapi/linux/btf.h, kinds 1-19).
BTF_EXTRA = {1: lambda v: 4, 3: lambda v: 12, 4: lambda v: 12 * v, 5: lambda v: 12 * v,
             6: lambda v: 8 * v, 13: lambda v: 8 * v, 14: lambda v: 4,
             15: lambda v: 12 * v, 17: lambda v: 4, 19: lambda v: 12 * v}
BTF_NO_EXTRA = {2, 7, 8, 9, 10, 11, 12, 16, 18}


@functools.lru_cache(maxsize=None)
def btf_names(path=KERNEL_BTF):
    """{"typedef": names, "func": names, "strings": the string section} of
    the BTF at PATH; None if it cannot be read or is not BTF."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        magic, _, _, hdr_len, type_off, type_len, str_off, str_len = \
            struct.unpack_from("<HBBIIIII", data)
    except (OSError, struct.error):
        return None
    if magic != 0xEB9F:
        return None
    types = data[hdr_len + type_off:hdr_len + type_off + type_len]
    strings = data[hdr_len + str_off:hdr_len + str_off + str_len]
    found = {BTF_KIND_TYPEDEF: set(), BTF_KIND_FUNC: set()}
    off = 0
    while off + 12 <= len(types):
        name_off, info, _ = struct.unpack_from("<III", types, off)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        if kind in found:
            found[kind].add(strings[name_off:strings.index(b"\0", name_off)].decode())
        if kind not in BTF_NO_EXTRA and kind not in BTF_EXTRA:
            return None
        off += 12 + (BTF_EXTRA[kind](vlen) if kind in BTF_EXTRA else 0)
    return {"typedef": found[BTF_KIND_TYPEDEF], "func": found[BTF_KIND_FUNC],
            "strings": strings}


def missing_tracepoints(names, path=KERNEL_BTF):
    """Which of the tracepoints NAMES the kernel lacks (no btf_trace_NAME
    typedef, as the tools find them: tracer/attach_choice.c); None if its
    BTF cannot be read."""
    btf = btf_names(path)
    if btf is None:
        return None
    return [n for n in names if f"btf_trace_{n}" not in btf["typedef"]]


def kernel_has_what(line, path=KERNEL_BTF):
    """True when LINE says the kernel lacks a tracepoint, its function or
    bpf_loop and the kernel's BTF has it; False when the BTF agrees; None
    when the claim is none of those, or the BTF cannot be read."""
    btf = btf_names(path)
    tracepoint, loop = LACKS_TRACEPOINT.search(line), LACKS_BPF_LOOP.search(line)
    if btf is None or not (tracepoint or loop):
        return None
    if loop:
        # An enumerator of enum bpf_func_id: its name is in the strings.
        return b"\0BPF_FUNC_loop\0" in btf["strings"]
    name = tracepoint.group(2)
    if f"btf_trace_{name}" in btf["typedef"]:
        return True
    # The fallback function of an mm_filemap_ tracepoint is its name's rest.
    return bool(tracepoint.group(3)) and name.removeprefix("mm_") in btf["func"]

"""pagecache: what of some files is in the page cache; evict it; warm it.

Subcommands (`pagecache CMD` or `pagetrace cache CMD`):
  status  per-file table of cached, dirty, writeback, evicted and recently
          evicted pages, from cachestat(2) (Linux 6.5+), or from mincore(2)
          where the kernel lacks cachestat;
  evict   fsync dirty files, drop their pages with POSIX_FADV_DONTNEED, check
          the result with cachestat and explain every page that stayed
          resident (mapped by a running process: which one);
  warm    read files into the page cache.

The files are named on the command line (-r walks directories) or taken from
the `read` records of a pagetrace trace (docs/trace-format.md, read by the
core reader `pagetrace.tracefile`). The tool never writes to any of the
files and never opens a FIFO or device: it checks with lstat/stat first and
opens with O_NONBLOCK.

Part of the standard-library core: scripts/pagecache and the start-up bench
(pagetrace.bench) use these functions under sudo with the system Python.
Exceptions carry no tool name; only `main` adds it.
"""

import argparse
import ctypes
import errno
import json
import os
import stat
import sys
from collections import namedtuple

from . import __version__, tracefile
from .escape import display_path

PROG = "pagecache"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# cachestat(2) has number 451 on every architecture (the unified table).
SYS_CACHESTAT = 451
METHOD_CACHESTAT = "cachestat"
METHOD_MINCORE = "mincore"

_libc = ctypes.CDLL(None, use_errno=True)


class _CacheStatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "nr_cache", "nr_dirty", "nr_writeback", "nr_evicted",
        "nr_recently_evicted")]


# Page counts of one file or range. Fields are None where the method in use
# cannot tell (mincore only knows "resident or not").
CacheStat = namedtuple(
    "CacheStat", "cached dirty writeback evicted recently_evicted")


class PagecacheError(Exception):
    """A problem with one file: reported as 'PATH: message' (main adds the tool's name)."""

    def __init__(self, path, message):
        super().__init__(f"{display_path(path)}: {message}")
        self.path = path
        self.message = message



def pages_in(size):
    return (size + PAGE_SIZE - 1) // PAGE_SIZE


# ---------------------------------------------------------------------------
# The two kernel interfaces: cachestat(2), and mincore(2) as the fallback.

# Both cachestat(2) (EPERM) and mincore(2) (every page "resident") hide the
# cache state of a file from a caller who neither owns it nor may write it.
HIDDEN_STATE = ("the kernel shows a file's cache state only to its owner, to "
                "whoever may write it, and to root")


def cachestat(fd, offset=0, length=0):
    """cachestat(2) of [offset, offset+length) of fd (length 0: to the end).

    Raises OSError (ENOSYS on kernels before 6.5, EPERM when HIDDEN_STATE).
    """
    crange = _CacheStatRange(offset, length)
    cstat = _CacheStat()
    ret = _libc.syscall(ctypes.c_long(SYS_CACHESTAT), ctypes.c_uint(fd),
                        ctypes.byref(crange), ctypes.byref(cstat),
                        ctypes.c_uint(0))
    if ret != 0:
        err = ctypes.get_errno()
        detail = f" ({HIDDEN_STATE})" if err == errno.EPERM else ""
        raise OSError(err, f"cachestat: {os.strerror(err)}{detail}")
    return CacheStat(cstat.nr_cache, cstat.nr_dirty, cstat.nr_writeback,
                     cstat.nr_evicted, cstat.nr_recently_evicted)


_cachestat_available = None


def cachestat_available():
    """Whether the kernel has cachestat(2): an invalid fd gives EBADF if it
    does and ENOSYS if it does not, without touching any file."""
    global _cachestat_available
    if _cachestat_available is None:
        try:
            cachestat(-1)
            _cachestat_available = True
        except OSError as exc:
            _cachestat_available = exc.errno != errno.ENOSYS
    return _cachestat_available


def choose_method(requested="auto"):
    """The method to use and, when it is not the one asked for, why."""
    if requested == METHOD_MINCORE:
        return METHOD_MINCORE, None
    if cachestat_available():
        return METHOD_CACHESTAT, None
    if requested == METHOD_CACHESTAT:
        raise OSError(errno.ENOSYS, "cachestat(2) is not available on this "
                      "kernel (Linux 6.5 or later needed)")
    return METHOD_MINCORE, ("cachestat(2) not available (ENOSYS), using "
                            "mincore(2): dirty, writeback and eviction "
                            "counts are unknown")


_PROT_READ = 0x1
_MAP_SHARED = 0x01
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def mincore_vector(fd, size):
    """One byte per page of the file, bit 0 set where the page is resident.

    Maps the file read-only and shared (touching no page) and asks mincore(2).
    Refuses (EPERM) where mincore would claim every page resident.
    """
    if size == 0:
        return b""
    if not (os.geteuid() == 0 or os.fstat(fd).st_uid == os.geteuid()
            or os.access(f"/proc/self/fd/{fd}", os.W_OK, effective_ids=True)):
        raise OSError(errno.EPERM, f"mincore: {os.strerror(errno.EPERM)} ({HIDDEN_STATE})")
    addr = _libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, "mmap: " + os.strerror(err))
    try:
        vec = (ctypes.c_ubyte * pages_in(size))()
        if _libc.mincore(addr, size, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "mincore: " + os.strerror(err))
        return bytes(b & 1 for b in vec)
    finally:
        _libc.munmap(addr, size)


def runs_of_pages(pages):
    """Sorted page numbers -> merged half-open runs [(first, end), ...]."""
    runs = []
    for page in pages:
        if runs and runs[-1][1] == page:
            runs[-1][1] = page + 1
        elif not runs or runs[-1][1] < page:
            runs.append([page, page + 1])
    return [tuple(run) for run in runs]


def resident_ranges(fd, size, method):
    """Half-open page runs [(first, end), ...] that are in the page cache.

    With cachestat, bisects: a range is split only while it is partly
    cached, so the cost grows with the number of runs, not the file size.
    """
    npages = pages_in(size)
    if method == METHOD_MINCORE:
        vec = mincore_vector(fd, size)
        return runs_of_pages(i for i in range(npages) if vec[i])
    runs = []

    def walk(first, end):
        cached = cachestat(fd, first * PAGE_SIZE, (end - first) * PAGE_SIZE).cached
        if cached == 0:
            return
        if cached >= end - first:
            if runs and runs[-1][1] == first:
                runs[-1] = (runs[-1][0], end)
            else:
                runs.append((first, end))
            return
        middle = (first + end) // 2
        walk(first, middle)
        walk(middle, end)

    if npages:
        walk(0, npages)
    return runs


def file_cachestat(fd, size, method):
    """Whole-file counts with either method."""
    if method == METHOD_CACHESTAT:
        return cachestat(fd, 0, 0)
    return CacheStat(sum(mincore_vector(fd, size)), None, None, None, None)


def count_cached_pages(fd, size, pages, method):
    """How many of the given page numbers (within the file) are cached."""
    pages = sorted(p for p in pages if p < pages_in(size))
    if method == METHOD_MINCORE:
        vec = mincore_vector(fd, size)
        return sum(vec[p] for p in pages)
    return sum(cachestat(fd, first * PAGE_SIZE, (end - first) * PAGE_SIZE).cached
               for first, end in runs_of_pages(pages))


# ---------------------------------------------------------------------------
# Finding the files, and opening them without ever blocking or following a
# link that was not asked for.

def describe_file_type(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def collect_files(paths, recursive=False, follow=False):
    """Expand the command line's paths into regular files.

    Returns (files, problems): problems are PagecacheErrors for paths that
    were skipped, each with the reason. Nothing is opened here.
    """
    files, problems = [], []
    for path in paths:
        st = _stat_or_problem(path, follow, problems)
        if st is None or _take_non_directory(path, st, files, problems):
            continue
        if recursive:
            _walk_directory(path, follow, files, problems)
        else:
            problems.append(PagecacheError(path, "Is a directory (use -r to walk it)"))
    return files, problems


def _stat_or_problem(path, follow, problems):
    try:
        return os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        problems.append(PagecacheError(path, exc.strerror))
        return None


def _take_non_directory(path, st, files, problems):
    """A regular file goes to files; a link (not followed) or another kind
    of file is a problem. False for a directory, which the caller handles."""
    if stat.S_ISREG(st.st_mode):
        files.append(path)
    elif stat.S_ISLNK(st.st_mode):
        problems.append(PagecacheError(
            path, "is a symbolic link, not followed (use --follow)"))
    elif stat.S_ISDIR(st.st_mode):
        return False
    else:
        problems.append(PagecacheError(
            path, f"is {describe_file_type(st.st_mode)}, skipped"))
    return True


def _walk_directory(top, follow, files, problems):
    def on_error(exc):
        problems.append(PagecacheError(exc.filename, exc.strerror))

    for dirpath, dirnames, filenames in os.walk(top, onerror=on_error,
                                                followlinks=follow):
        dirnames.sort()
        # Links to directories are listed in dirnames; os.walk does not
        # descend into them unless following, so they are said here.
        for name in sorted(filenames) + [d for d in dirnames
                                         if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            st = _stat_or_problem(path, follow, problems)
            if st is not None:
                _take_non_directory(path, st, files, problems)


def open_regular(path, follow=False):
    """Open a regular file read-only, or raise PagecacheError.

    Checks the type before opening and again on the open descriptor (the file
    may have been replaced in between); O_NONBLOCK so that a FIFO or device
    that slipped through can never block the open.
    """
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        raise PagecacheError(path, exc.strerror) from None
    if not stat.S_ISREG(st.st_mode):
        raise PagecacheError(path, f"is {describe_file_type(st.st_mode)}, skipped")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise PagecacheError(path, exc.strerror) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PagecacheError(path, "changed into something that is not a "
                             "regular file, skipped")
    return fd


# ---------------------------------------------------------------------------
# Traces (docs/trace-format.md, version 1).

Trace = namedtuple("Trace", "path page_size pages special malformed lost")
Trace.__doc__ = """A trace read for its set of files and pages (`read` records).

pages:     {path: set of byte offsets}, paths in first-read order
special:   the // paths (deleted, unknown, dev), which name no usable file
malformed: [(line_number, reason)]
lost:      the trailer's lost count, or None without a trailer
"""


def read_trace(path):
    """Read a trace's files and pages with the core reader. Raises
    tracefile.TraceError if it is refused; malformed lines are collected,
    not fatal (the format says to go on)."""
    trace = tracefile.read(path)
    pages, special = tracefile.pages_by_file(trace, kinds=("read",))
    lost = trace.trailer["lost"] if trace.trailer else None
    return Trace(trace.source, trace.header.page_size, pages, special,
                 trace.malformed, lost)


def trace_notes(trace):
    """Messages about what of a trace is not used, for stderr."""
    where = display_path(trace.path)
    notes = [f"{where}:{number}: {reason}" for number, reason in trace.malformed]
    if trace.special:
        notes.append(f"{where}: skipped {len(trace.special)} special path(s) "
                     f"that name no usable file: "
                     + ", ".join(display_path(p) for p in trace.special[:5])
                     + (", ..." if len(trace.special) > 5 else ""))
    if trace.lost:
        notes.append(f"{where}: warning: the tracer lost {trace.lost} "
                     "event(s): the trace is incomplete")
    return notes


def traced_system_pages(trace, path):
    """The trace's pages of one file, as this system's page numbers."""
    pages = set()
    for offset in trace.pages[path]:
        first = offset // PAGE_SIZE
        end = (offset + trace.page_size + PAGE_SIZE - 1) // PAGE_SIZE
        pages.update(range(first, end))
    return pages


# ---------------------------------------------------------------------------
# Which processes map a file: the usual reason that pages survive DONTNEED.

Mapping = namedtuple("Mapping", "pid comm start end perms first_page end_page")


def find_mappings(st):
    """Every mapping of the file (device and inode of st) in /proc/*/maps.

    Returns (mappings, unreadable): the number of processes whose maps could
    not be read (other users' processes when not root).
    """
    want_dev = (os.major(st.st_dev), os.minor(st.st_dev))
    mappings, unreadable = [], 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                lines = f.readlines()
        except (PermissionError, ProcessLookupError):
            unreadable += 1
            continue
        except OSError:
            continue  # exited meanwhile
        for line in lines:
            mapping = _parse_maps_line(pid, line, want_dev, st.st_ino)
            if mapping:
                mappings.append(mapping)
    return mappings, unreadable


def _parse_maps_line(pid, line, want_dev, want_ino):
    parts = line.split(None, 5)
    if len(parts) < 5 or parts[4] != str(want_ino):
        return None
    major, _, minor = parts[3].partition(":")
    try:
        if (int(major, 16), int(minor, 16)) != want_dev:
            return None
        start, end = (int(x, 16) for x in parts[0].split("-"))
        first_page = int(parts[2], 16) // PAGE_SIZE
    except ValueError:
        return None
    return Mapping(int(pid), _comm_of(pid), start, end, parts[1], first_page,
                   first_page + (end - start) // PAGE_SIZE)


def _comm_of(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def explain_resident(runs, mappings, unreadable):
    """Split resident page runs by the mappings that cover them.

    Returns [{"first_page", "end_page", "reason", "mapped_by": [...]}].
    """
    explained = []
    for first, end in runs:
        cuts = {first, end}
        for m in mappings:
            cuts.update(p for p in (m.first_page, m.end_page) if first < p < end)
        cuts = sorted(cuts)
        for lo, hi in zip(cuts, cuts[1:]):
            covering = [m for m in mappings if m.first_page <= lo < m.end_page]
            _append_piece(explained, lo, hi, covering, unreadable)
    return explained


def _append_piece(explained, lo, hi, covering, unreadable):
    mapped_by = [{"pid": m.pid, "comm": m.comm, "perms": m.perms,
                  "maps": f"{m.start:x}-{m.end:x}"} for m in covering]
    if covering:
        reason = "mapped by " + ", ".join(
            f"pid {m.pid} ({m.comm}) at {m.start:x}-{m.end:x} {m.perms}"
            for m in covering)
    else:
        reason = ("not mapped by any process"
                  + (f" whose maps could be read ({unreadable} could not: "
                     "run as root)" if unreadable else "")
                  + ": locked, dirty, under writeback, or read again since")
    if explained and explained[-1]["end_page"] == lo and explained[-1]["reason"] == reason:
        explained[-1]["end_page"] = hi
    else:
        explained.append({"first_page": lo, "end_page": hi, "reason": reason,
                          "mapped_by": mapped_by})


# ---------------------------------------------------------------------------
# The three operations, on one open file each.

def status_fd(fd, path, method, traced_pages=None, list_pages=False):
    """The cache state of one file as a dict (see the --json output)."""
    size = os.fstat(fd).st_size
    counts = file_cachestat(fd, size, method)
    result = {"path": path, "size": size, "pages": pages_in(size),
              **counts._asdict()}
    result["percent"] = _percent(counts.cached, result["pages"])
    if traced_pages is not None:
        result["traced_pages"] = sum(1 for p in traced_pages if p < pages_in(size))
        result["traced_cached"] = count_cached_pages(fd, size, traced_pages, method)
    if list_pages:
        result["resident"] = [list(r) for r in resident_ranges(fd, size, method)]
    return result


def _percent(part, whole):
    return round(100.0 * part / whole, 1) if whole else 0.0


def _visible_cachestat(fd, size, method):
    """(counts, None), or (None, why) where the kernel hides the state."""
    try:
        return file_cachestat(fd, size, method), None
    except OSError as exc:
        if exc.errno != errno.EPERM:
            raise
        return None, exc.strerror


def evict_fd(fd, path, method, sync=True):
    """Drop one file's pages from the page cache and check the result.

    Dirty pages cannot be dropped, so the file is fsynced first (or, with
    sync=False, refused). Returns a dict: status is "evicted", "partial"
    (with "resident" explaining each run of pages that stayed), "refused"
    (with "reason"), or "unverified" (dropped, but the kernel would not show
    the result: "reason" says why).
    """
    st = os.fstat(fd)
    before, _ = _visible_cachestat(fd, st.st_size, method)
    result = {"path": path, "size": st.st_size, "pages": pages_in(st.st_size),
              "cached_before": None if before is None else before.cached,
              "dirty_before": None if before is None else before.dirty,
              "synced": False}
    # Where dirty pages cannot be seen (mincore, hidden state), always sync:
    # it is cheap when the file is clean.
    unflushed = (None if before is None or before.dirty is None
                 else before.dirty + before.writeback)
    if unflushed != 0:
        if not sync:
            found = ("dirty pages cannot be seen" if unflushed is None
                     else f"{unflushed} dirty or writeback pages")
            return _refused(result, f"{found}, and --no-sync was given")
        try:
            os.fsync(fd)
            result["synced"] = True
        except OSError as exc:
            return _refused(result, f"fsync failed: {exc.strerror}")
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    after, hidden = _visible_cachestat(fd, st.st_size, method)
    if after is None:
        result.update(status="unverified", reason=hidden, cached_after=None, resident=[])
        return result
    result["cached_after"] = after.cached
    result["status"] = "evicted" if after.cached == 0 else "partial"
    result["resident"] = []
    if after.cached:
        runs = resident_ranges(fd, st.st_size, method)
        mappings, unreadable = find_mappings(st)
        result["resident"] = explain_resident(runs, mappings, unreadable)
    return result


def _refused(result, reason):
    result.update(status="refused", reason=reason, cached_after=result["cached_before"],
                  resident=[])
    return result


def warm_fd(fd, path, method):
    """Read one file front to back so that it is in the page cache."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    offset = 0
    while True:
        n = os.preadv(fd, [view], offset)
        if n <= 0:
            break
        offset += n
    size = os.fstat(fd).st_size
    cached = file_cachestat(fd, size, method).cached
    return {"path": path, "size": size, "pages": pages_in(size),
            "bytes_read": offset, "cached_after": cached,
            "percent": _percent(cached, pages_in(size))}


def apply_to_files(operation, paths, follow=False, **kwargs):
    """Run operation(fd, path, **kwargs) on each file.

    Returns (results, problems); a file that cannot be opened or handled is
    a problem, and the others go on.
    """
    results, problems = [], []
    for path in paths:
        try:
            fd = open_regular(path, follow)
        except PagecacheError as exc:
            problems.append(exc)
            continue
        try:
            results.append(operation(fd, path, **kwargs))
        except OSError as exc:
            problems.append(PagecacheError(path, exc.strerror or str(exc)))
        finally:
            os.close(fd)
    return results, problems


# Entry points for scripts/startup-bench: whole sets of files at once.

def evict_files(paths, method=None, sync=True):
    method = method or choose_method()[0]
    return apply_to_files(evict_fd, paths, method=method, sync=sync)


def warm_files(paths, method=None):
    method = method or choose_method()[0]
    return apply_to_files(warm_fd, paths, method=method)


def traced_residency(trace, method=None):
    """(cached, total) over the trace's pages of the files that exist now."""
    method = method or choose_method()[0]
    cached = total = 0
    for path in trace.pages:
        try:
            fd = open_regular(path)
        except PagecacheError:
            continue
        try:
            pages = traced_system_pages(trace, path)
            size = os.fstat(fd).st_size
            total += sum(1 for p in pages if p < pages_in(size))
            cached += count_cached_pages(fd, size, pages, method)
        finally:
            os.close(fd)
    return cached, total


# ---------------------------------------------------------------------------
# Command line.

def human_size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024.0
    return str(n)


def format_runs(runs):
    """Half-open page runs (pairs, or dicts of explain_resident) as '0-3,8'."""
    parts = []
    for run in runs:
        first, end = (run["first_page"], run["end_page"]) if isinstance(run, dict) else run
        parts.append(str(first) if end - first == 1 else f"{first}-{end - 1}")
    return ",".join(parts)


def _cell(value):
    return "-" if value is None else str(value)


def _sum_or_none(rows, key):
    values = [row[key] for row in rows]
    return None if any(v is None for v in values) else sum(values)


def status_totals(rows):
    total = {"path": "TOTAL", "size": sum(r["size"] for r in rows),
             "pages": sum(r["pages"] for r in rows)}
    for key in CacheStat._fields:
        total[key] = _sum_or_none(rows, key)
    total["percent"] = _percent(total["cached"] or 0, total["pages"])
    if rows and "traced_pages" in rows[0]:
        total["traced_pages"] = sum(r["traced_pages"] for r in rows)
        total["traced_cached"] = sum(r["traced_cached"] for r in rows)
    return total


def print_status_table(rows, total, out):
    traced = "traced_pages" in total
    head = ["SIZE", "PAGES", "CACHED", "%", "DIRTY", "WRITEBACK", "EVICTED",
            "RECENT"] + (["TRACED", "T-CACHED"] if traced else []) + ["FILE"]
    table = [head]
    for row in rows + [total]:
        cells = [human_size(row["size"]), str(row["pages"]), _cell(row["cached"]),
                 f"{row['percent']:.1f}", _cell(row["dirty"]), _cell(row["writeback"]),
                 _cell(row["evicted"]), _cell(row["recently_evicted"])]
        if traced:
            cells += [str(row["traced_pages"]), str(row["traced_cached"])]
        table.append(cells + [display_path(row["path"])])
    widths = [max(len(r[i]) for r in table) for i in range(len(head) - 1)]
    for index, cells in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)) + "  " + cells[-1],
              file=out)
        row = rows[index - 1] if 0 < index <= len(rows) else None
        if row and "resident" in row:
            print(f"    resident pages: {format_runs(row['resident']) or 'none'}",
                  file=out)


def print_evict_results(results, out):
    for r in results:
        where = display_path(r["path"])
        if r["status"] in ("refused", "unverified"):
            print(f"{r['status']:<8} {where}: {r['reason']}", file=out)
            continue
        synced = ", synced first" if r["synced"] else ""
        if r["status"] == "evicted":
            before = "?" if r["cached_before"] is None else r["cached_before"]
            print(f"evicted  {where}: {before} cached page(s) "
                  f"dropped, 0 left{synced}", file=out)
            continue
        print(f"partial  {where}: {r['cached_after']} of {r['pages']} page(s) "
              f"stayed resident{synced}", file=out)
        for piece in r["resident"]:
            count = piece["end_page"] - piece["first_page"]
            print(f"    page{'s' if count > 1 else ''} {format_runs([piece])}: "
                  f"{piece['reason']}", file=out)


def print_warm_results(results, out):
    for r in results:
        print(f"warmed   {display_path(r['path'])}: {r['cached_after']} of "
              f"{r['pages']} page(s) cached ({r['percent']:.1f}%)", file=out)


EXAMPLES = """\
examples:
  pagecache status /usr/lib/x86_64-linux-gnu/libc.so.6
  pagecache status -r /usr/lib/firefox-esr --json
  pagecache status --trace reads.log --pages
  pagecache evict --trace reads.log        # selectively cold: only these files
  pagecache warm -r /var/tmp/sapp
exit status: 0 all done; 1 some file skipped or failed, a page stayed resident
after evict, an eviction was refused, or the trace was refused (empty, binary,
unknown version, bad header); 2 bad usage.
"""


def build_parser(prog=PROG):
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Show, drop or fill the page cache of files, using "
                    "cachestat(2) (mincore(2) where the kernel lacks it).",
        epilog=EXAMPLES)
    parser.add_argument("-V", "--version", action="version",
                        version=f"%(prog)s (pagetrace) {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{status,evict,warm}")
    sub.required = True
    helps = {"status": "per-file table of cached, dirty, writeback and evicted pages",
             "evict": "fsync, drop with POSIX_FADV_DONTNEED, verify, explain what stayed",
             "warm": "read the files into the page cache"}
    for name, text in helps.items():
        p = sub.add_parser(name, help=text, description=text, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("files", nargs="*", metavar="FILE")
        p.add_argument("--trace", metavar="TRACE",
                       help="take the files from the read records of a "
                            "pagetrace trace (format version 1 or 2)")
        p.add_argument("-r", "--recursive", action="store_true",
                       help="walk directories")
        p.add_argument("--follow", action="store_true",
                       help="follow symbolic links (default: skip them)")
        p.add_argument("-V", "--version", action="version",
                       version=f"{prog} (pagetrace) {__version__}")
        p.add_argument("-j", "--json", action="store_true",
                       help="one JSON object on stdout instead of text")
        p.add_argument("--method", choices=("auto", METHOD_CACHESTAT, METHOD_MINCORE),
                       default="auto",
                       help="how to read cache state (default: cachestat if the "
                            "kernel has it, else mincore)")
        if name == "status":
            p.add_argument("--pages", action="store_true",
                           help="also list the runs of resident pages of each file")
        if name == "evict":
            p.add_argument("--no-sync", action="store_true",
                           help="refuse files with dirty pages instead of fsyncing them")
    return parser


def gather_targets(args):
    """(paths, problems, notes, trace) from FILEs or --trace."""
    if args.trace:
        trace = read_trace(args.trace)
        paths, problems = collect_files(list(trace.pages), False, args.follow)
        return paths, problems, trace_notes(trace), trace
    paths, problems = collect_files(args.files, args.recursive, args.follow)
    return paths, problems, [], None


def run_command(args, out=sys.stdout, err=sys.stderr):
    method, method_note = choose_method(args.method)
    paths, problems, notes, trace = gather_targets(args)
    if method_note:
        notes.insert(0, method_note)
    if args.command == "status":
        results, more = [], []
        for path in paths:
            traced = traced_system_pages(trace, path) if trace else None
            rs, ps = apply_to_files(status_fd, [path], args.follow, method=method,
                                    traced_pages=traced, list_pages=args.pages)
            results += rs
            more += ps
    elif args.command == "evict":
        results, more = apply_to_files(evict_fd, paths, args.follow, method=method,
                                       sync=not args.no_sync)
    else:
        results, more = apply_to_files(warm_fd, paths, args.follow, method=method)
    problems += more
    for note in notes:
        print(f"{args.prog}: {note}", file=err)
    for problem in problems:
        print(f"{args.prog}: {problem}", file=err)
    report(args, method, results, problems, notes, out)
    incomplete = any(r.get("status") in ("partial", "refused", "unverified")
                     for r in results)
    return 1 if problems or incomplete else 0


def report(args, method, results, problems, notes, out):
    document = {"tool": PROG, "command": args.command, "method": method,
                "page_size": PAGE_SIZE, "files": results,
                "errors": [{"path": p.path, "error": p.message} for p in problems],
                "notes": notes}
    if args.command == "status":
        document["total"] = status_totals(results)
    if args.json:
        json.dump(document, out, indent=1)
        out.write("\n")
        return
    if args.command == "status":
        print_status_table(results, document["total"], out)
    elif args.command == "evict":
        print_evict_results(results, out)
    else:
        print_warm_results(results, out)
    print(f"method: {method}(2)", file=out)


def main(argv=None, prog=PROG):
    """The command line; `prog` names the tool in messages (`pagecache`,
    or `pagetrace cache` from the front door)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.prog = prog
    if bool(args.files) == bool(args.trace):
        parser.error("give either FILEs or --trace TRACE (one of the two)")
    if args.trace and args.recursive:
        parser.error("-r does not apply to --trace")
    try:
        return run_command(args)
    except tracefile.TraceError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

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
core reader `pagetrace.core.tracefile`). The tool never writes to any of the
files and never opens a FIFO or device: it checks with lstat/stat first and
opens with O_NONBLOCK.

Part of the standard-library core: scripts/pagecache and the start-up bench
(pagetrace.tools.startup_bench) use these functions under sudo with the system Python.
Exceptions carry no tool name; only `main` (pagecache_cli.py) adds it.
This module is the kernel interfaces (cachestat, mincore, fadvise) and the
operations; pagecache_files.py finds and opens the files, reads traces and
explains resident pages; pagecache_cli.py is the command line.
"""
import ctypes
import errno
import os
import re
from collections import namedtuple
# The files' side, and the names 0.2's pagetrace.cache had (startup-bench
# reads traces and collects files through this module).
from pagetrace.tools.pagecache_files import (  # noqa: F401
    PAGE_SIZE, Mapping, PagecacheError, Trace, collect_files,
    describe_file_type, explain_resident, find_mappings, open_regular,
    pages_in, read_trace, trace_notes, traced_system_pages)



PROG = "pagecache"
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
        return bytes(vec).translate(_LOW_BIT)
    finally:
        _libc.munmap(addr, size)


# mincore's byte per page: bit 0 is residency, the others are reserved.
_LOW_BIT = bytes(b & 1 for b in range(256))
_RESIDENT_RUN = re.compile(b"\x01+")


def runs_in_vector(vec):
    """A mincore_vector() as half-open runs [(first, end), ...] of resident pages."""
    return [m.span() for m in _RESIDENT_RUN.finditer(vec)]


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
        return runs_in_vector(mincore_vector(fd, size))
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

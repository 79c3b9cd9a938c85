"""Ground truth for tests: which pages of a file are in the page cache.

mincore(2) on a read-only shared mapping reports residency page by page
without faulting anything in. posix_fadvise(DONTNEED) evicts a file that
nothing maps.

A page read in by a test can leave the cache again before the test looks:
this machine runs DAMON with a "pageout cold page cache" scheme
(/sys/kernel/mm/damon/admin/kdamonds/0), and memory pressure does the same
anywhere. Reclaim leaves a shadow entry, which cachestat(2) counts as
evicted; DONTNEED leaves none and clears those there were
(tests/test_ground_truth.py checks both). So "read since evict()" is "resident now, or
reclaimed since" (cached_since_eviction), not just "resident now".
"""
import contextlib
import ctypes
import ctypes.util
import errno
import mmap
import os
import time

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
PAGE = os.sysconf("SC_PAGE_SIZE")
MAP_FAILED = ctypes.c_void_p(-1).value
SYS_cachestat = 451


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted",
                 "nr_recently_evicted")]



def resident_pages(path):
    """Set of page indices of @path that are in the page cache."""
    size = os.path.getsize(path)
    if size == 0:
        return set()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr == MAP_FAILED:
            raise OSError(ctypes.get_errno(), "mmap " + path)
        try:
            npages = (size + PAGE - 1) // PAGE
            vec = ctypes.create_string_buffer(npages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore " + path)
            return {i for i in range(npages) if vec.raw[i] & 1}
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def _evicted_count(fd, first, count):
    where = _CachestatRange(first * PAGE, count * PAGE)
    stat = _Cachestat()
    if _libc.syscall(SYS_cachestat, fd, ctypes.byref(where), ctypes.byref(stat), 0) != 0:
        raise OSError(ctypes.get_errno(), "cachestat")
    return stat.nr_evicted


def have_cachestat():
    """Whether this kernel has cachestat(2) (Linux 6.5)."""
    fd = os.open("/", os.O_RDONLY)
    try:
        _evicted_count(fd, 0, 1)
        return True
    except OSError as e:
        return e.errno != errno.ENOSYS
    finally:
        os.close(fd)


def reclaimed_pages(path):
    """Pages of @path with a shadow entry: cached once, then reclaimed."""
    npages = (os.path.getsize(path) + PAGE - 1) // PAGE
    found = set()
    fd = os.open(path, os.O_RDONLY)
    try:
        # Bisect only the ranges that hold shadow entries.
        todo = [(0, npages)] if npages else []
        while todo:
            first, count = todo.pop()
            if not _evicted_count(fd, first, count):
                continue
            if count == 1:
                found.add(first)
            else:
                todo += [(first, count // 2), (first + count // 2, count - count // 2)]
    finally:
        os.close(fd)
    return found


def cached_since_eviction(path):
    """Pages brought into the cache since evict(@path): resident now, or
    reclaimed by the kernel since (see the module's docstring)."""
    return resident_pages(path) | reclaimed_pages(path)


# DONTNEED skips a folio someone else holds a reference to for a moment
# (reclaim or compaction isolating it, a DAMON access check): such a
# folio is asked again, EVICT_TRIES times at most, 0.1 s apart.
EVICT_TRIES = 5


def evict(*paths):
    """Drop @paths from the page cache and check that nothing stayed."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            for attempt in range(EVICT_TRIES):
                if attempt:
                    time.sleep(0.1)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                left = resident_pages(path)
                if not left:
                    break
        finally:
            os.close(fd)
        assert not left, (f"{path}: {len(left)} pages stayed cached after"
                          f" DONTNEED {EVICT_TRIES} times")
        # DONTNEED also clears shadow entries, so a later reclaim is the test's
        # (seen only through cachestat(2): not before Linux 6.5, where the
        # kernel matrix's guest checks use mincore alone, tests/kernels/).
        if have_cachestat():
            assert not reclaimed_pages(path), f"{path}: shadow entries survived DONTNEED"


def write_file(path, size, seed=0):
    """A file of @size bytes with content that differs page to page."""
    block = bytes((seed + i) & 0xff for i in range(PAGE))
    with open(path, "wb") as f:
        for i in range(0, size, PAGE):
            f.write(block[: min(PAGE, size - i)])
            block = block[1:] + block[:1]
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def locked_in_cache(path, size=None):
    """Keeps @path's pages cached (mlock), so DAMON cannot reclaim them:
    the first @size bytes, or the whole file."""
    size = os.path.getsize(path) if size is None else size
    fd = os.open(path, os.O_RDONLY)
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert addr != MAP_FAILED
    try:
        assert _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0, "mlock"
        yield
    finally:
        _libc.munmap(addr, size)
        os.close(fd)


def cold_file(directory, name, size):
    """A new file NAME of @size bytes in DIRECTORY (write_file), evicted
    (evict): its path."""
    path = os.path.join(directory, name)
    write_file(path, size)
    evict(path)
    return path

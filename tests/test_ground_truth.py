"""The tests' oracle itself: tests/pagecache_util.py.

The tracer, replay and cache tests compare what a tool did with the pages
that entered the page cache. Pages the kernel reclaims again in between
(DAMON pageout on this machine, memory pressure anywhere) must still count,
and pages dropped by the tests' own DONTNEED must not.
"""
import mmap
import os
import time

from conftest import require_root
from pagecache_util import (PAGE, cached_since_eviction, evict, reclaimed_pages,
                            resident_pages, write_file)

MADV_PAGEOUT = 21  # Linux 5.4+: reclaim these pages now


def test_reclaimed_pages_still_count_and_dontneed_leaves_none(tmp_path):
    require_root()
    f = str(tmp_path / "oracle.bin")
    write_file(f, 64 * PAGE)
    evict(f)
    assert reclaimed_pages(f) == set()
    fd = os.open(f, os.O_RDONLY)
    cpus = os.sched_getaffinity(0)
    # MADV_PAGEOUT drains only this CPU's batch of pages on their way to the
    # LRU, and passes over pages still in it: touched and paged out on one
    # CPU, a retry is rarely needed (best effort, it can still skip one).
    os.sched_setaffinity(0, {min(cpus)})
    try:
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        m.madvise(mmap.MADV_RANDOM)
        for page in (3, 10, 11, 40):
            m[page * PAGE]
        assert resident_pages(f) == {3, 10, 11, 40}
        for _ in range(20):
            m.madvise(MADV_PAGEOUT, 10 * PAGE, 2 * PAGE)
            if resident_pages(f) == {3, 40}:
                break
            time.sleep(0.05)
        m.close()
    finally:
        os.sched_setaffinity(0, cpus)
        os.close(fd)
    assert resident_pages(f) == {3, 40}
    assert reclaimed_pages(f) == {10, 11}
    assert cached_since_eviction(f) == {3, 10, 11, 40}
    # The tests' own eviction is not a reclaim: it leaves no shadow entries,
    # and it clears the old ones, so every test starts from nothing.
    evict(f)
    assert reclaimed_pages(f) == set()
    assert cached_since_eviction(f) == set()

"""Faults that map a PMD-sized folio whole (2 MiB, one page-table entry)
leave no event for the pages besides their own: fault-around's
filemap_map_pmd() returns before filemap:mm_filemap_map_pages fires, and
after filemap_fault() it is finish_fault()'s do_set_pmd(). The tools find
those pages in the thread's page tables once the fault has ended
(page_access.bpf.h: resolve_silent_fault(), map_fault_folio();
docs/tracer.md, "Large folios mapped whole").

The case: xfs on a fresh zram device, a 16 MiB file mapped with
MADV_HUGEPAGE, so that its mmap read-around builds 2 MiB folios (an
untraced run first); then, traced, one page touched in each 2 MiB. The
last folio keeps readahead's mark, so fault-around skips it and
filemap_fault() serves that touch: both ways are in each run. Ground truth:
the process's own page tables (/proc/self/pagemap) before and after each
touch; the test fails if the kernel did not map each folio whole, so that
the case is the one it claims.

`cachetop` runs with `cachestat` beside it, as tests/cachefuzz.py does:
with interrupts off at page_fault_user, the second program's bpf_find_vma()
there gets -EBUSY; before the fix cachetop counted 1 hit and 0 mapped pages
here where the kernel says 8 and 4,088 (7.3's seed 1118 in the kernel
matrix).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, require_root
from cachefuzz import Cachestat, fresh_filesystem
from pagecache_util import PAGE, evict, write_file
from test_trace_cachetools import CACHETOP, file_row
from test_trace_used import PAGEMAP_HELPER, run_used

MiB = 1 << 20
PMD_PAGES = 2 * MiB // PAGE
TOUCHED = [i * PMD_PAGES + 7 for i in range(8)]

# Touch each page once; print as JSON what the page tables say each touch
# mapped besides its page, and whether the page was in the page cache just
# before (mincore: DAMON here may reclaim a folio between the runs, and
# that touch is then a miss).
TOUCH_AND_REPORT = PAGEMAP_HELPER.format(page=PAGE) + """
import json, sys
libc = ctypes.CDLL(None, use_errno=True)
def cached(addr):
    vec = ctypes.create_string_buffer(1)
    if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t({page}), vec):
        raise OSError(ctypes.get_errno(), "mincore")
    return bool(vec.raw[0] & 1)
path, pages = sys.argv[1], [int(p) for p in sys.argv[2:]]
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_HUGEPAGE)
va, n = map_address(path), os.fstat(fd).st_size // {page}
touches, was_cached = [], []
for page in pages:
    before = set(present_pages(va, n))
    was_cached.append(cached(va + page * {page}))
    m[page * {page} + int(os.environ.get("TOUCH_BYTE", "0"))]
    touches.append(sorted(set(present_pages(va, n)) - before - {{page}}))
print(json.dumps({{"va": va, "touches": touches, "cached": was_cached}}), file=sys.stderr)
""".format(page=PAGE)


@pytest.fixture
def pmd_folios(tmp_path):
    """The file, its page cache in 2 MiB folios, and the touch script."""
    require_root()
    script = tmp_path / "touch.py"
    script.write_text(TOUCH_AND_REPORT)
    with fresh_filesystem("xfs", size_mib=512) as (mountpoint, _):
        path = os.path.join(mountpoint, "f16m")
        write_file(path, 16 * MiB)
        evict(path)
        warm = subprocess.run([sys.executable, str(script), path, *map(str, TOUCHED)],
                              capture_output=True, text=True, timeout=60)
        assert warm.returncode == 0, warm.stderr
        yield path, [sys.executable, str(script), path, *map(str, TOUCHED)]


def kernel_report(stderr):
    return json.loads(next(line for line in reversed(stderr.splitlines())
                           if line.startswith('{"va"')))


def kernel_mapped(stderr):
    """The pages mapped besides the touched ones, from the page tables;
    asserts that each touch mapped its folio whole."""
    report = kernel_report(stderr)
    assert report["va"] % (2 * MiB) == 0, "the mapping is not 2 MiB-aligned: not the case"
    for page, pages in zip(TOUCHED, report["touches"]):
        first = page - page % PMD_PAGES
        assert pages == [p for p in range(first, first + PMD_PAGES) if p != page], \
            f"the touch of page {page} did not map its 2 MiB folio whole: not the case"
    return {p for pages in report["touches"] for p in pages}


def cachetop_beside_cachestat(command):
    """COMMAND under `cachetop -j -c`, `cachestat` beside it (as
    tests/cachefuzz.py runs them): its process, which exited 0."""
    beside = Cachestat(os.path.join(REPO, "tracer"))
    try:
        proc = subprocess.run([CACHETOP, "-j", "-c", " ".join(command)],
                              capture_output=True, text=True, timeout=120)
    finally:
        beside.stop()
    assert proc.returncode == 0, proc.stderr
    return proc


def together_mapped(report):
    """The pages mapped besides the touched ones, for touches with no
    system call between them; asserts that each folio was mapped whole."""
    mapped = set(report["touches"][0])
    assert len(mapped) == len(TOUCHED) * (PMD_PAGES - 1), "not each folio mapped whole: not the case"
    return mapped


def assert_cachetop_counts(proc, path, report, mapped):
    """cachetop's row for @path equals the kernel's: a touch of a page
    cached before it is a hit, any other a miss; @mapped as mapped."""
    hits = sum(report["cached"])
    summary = json.loads(proc.stdout)
    assert summary["lost"] == 0
    row = file_row(summary, path)
    assert (row["hits"], row["misses"], row["mapped"]) == (hits, len(TOUCHED) - hits, len(mapped))


def test_cachetop_beside_cachestat_counts_pmd_mapped_faults(pmd_folios):
    path, command = pmd_folios
    proc = cachetop_beside_cachestat(command)
    assert_cachetop_counts(proc, path, kernel_report(proc.stderr), kernel_mapped(proc.stderr))


def test_trace_used_records_pmd_mapped_faults(pmd_folios, tmp_path):
    path, command = pmd_folios
    trace, proc, _ = run_used(tmp_path, "--", *command)
    mapped = kernel_mapped(proc.stderr)
    assert trace.kind_set(path, "access") == set(TOUCHED)
    assert trace.kind_set(path, "map") == mapped


def test_trace_used_records_pmd_mapped_faults_at_odd_addresses(pmd_folios, tmp_path,
                                                               monkeypatch):
    """The same touches at the last byte of each page: the faulting
    address is odd. Each touch is still its page's access (a silent
    fault's address once kept its low bit, which resolve_silent() read as
    a mark of its own, and such a touch counted no access)."""
    path, command = pmd_folios
    monkeypatch.setenv("TOUCH_BYTE", str(PAGE - 1))
    trace, proc, _ = run_used(tmp_path, "--", *command)
    mapped = kernel_mapped(proc.stderr)
    assert trace.kind_set(path, "access") == set(TOUCHED)
    assert trace.kind_set(path, "map") == mapped


TOUCH_TOGETHER = TOUCH_AND_REPORT.replace("""for page in pages:
    before = set(present_pages(va, n))
    was_cached.append(cached(va + page * {page}))
    m[page * {page} + int(os.environ.get("TOUCH_BYTE", "0"))]
    touches.append(sorted(set(present_pages(va, n)) - before - {{page}}))""".format(page=PAGE), """before = set(present_pages(va, n))
was_cached = [cached(va + page * {page}) for page in pages]
for page in pages:
    m[page * {page}]
touches = [sorted(set(present_pages(va, n)) - before - set(pages))]""".format(page=PAGE))


@pytest.mark.parametrize("order", ["forward", "last-first"])
def test_back_to_back_pmd_mapped_faults(pmd_folios, tmp_path, order):
    """The 8 touches with no system call between them: each fault's lookup
    at the next fault finds bpf_find_vma's irq_work busy (cachestat beside
    cachetop), and waits for the thread's next system call. Last-first, the
    touch that filemap_fault() serves (the last folio's) comes first, and
    its folio's lookup is the busy one (7.3's seed 1140: 503 mapped pages
    uncounted)."""
    path, command = pmd_folios
    script = tmp_path / "together.py"
    script.write_text(TOUCH_TOGETHER)
    pages = command[3:] if order == "forward" else command[:2:-1]
    proc = cachetop_beside_cachestat([command[0], str(script), command[2], *pages])
    report = kernel_report(proc.stderr)
    assert_cachetop_counts(proc, path, report, together_mapped(report))


# The file mapped with MAP_FIXED over anonymous memory the thread has just
# faulted in, so that an address's VMA changes from anonymous to the file's
# between two faults; then the touches, back to back. Everything the
# interpreter allocates is allocated first (a warm-up of the same calls):
# another anonymous fault in between would replace the VMA remembered.
TOUCH_WHERE_ANONYMOUS_WAS = PAGEMAP_HELPER.format(page=PAGE) + """
import json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
MAP_FIXED, PMD, RW = 0x10, 2 << 20, mmap.PROT_READ | mmap.PROT_WRITE
ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
path, pages = sys.argv[1], [int(p) for p in sys.argv[2:]]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
n = size // {page}
offsets = [p * {page} for p in pages]
probe = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
vec = ctypes.create_string_buffer(n)
if libc.mincore(probe, size, vec):
    raise OSError(ctypes.get_errno(), "mincore")
was_cached = [bool(vec.raw[p] & 1) for p in pages]
libc.munmap(ctypes.c_void_p(probe), ctypes.c_size_t(size))

def map_over_anonymous(fd, flags):
    anon = libc.mmap(None, size + PMD, RW, ANON, -1, 0)
    va = (anon + PMD - 1) & ~(PMD - 1)
    m = (ctypes.c_char * size).from_address(va)
    ctypes.memset(va, 1, 1)                   # an anonymous fault: its VMA looked up at ...
    if libc.mmap(va, size, mmap.PROT_READ, flags, fd, 0) != va:   # ... this system call
        raise OSError(ctypes.get_errno(), "mmap MAP_FIXED")
    libc.madvise(va, size, mmap.MADV_HUGEPAGE)
    return va, m

map_over_anonymous(-1, ANON | MAP_FIXED)      # the warm-up
va, m = map_over_anonymous(fd, mmap.MAP_SHARED | MAP_FIXED)
for offset in offsets:
    m[offset]
touches = [sorted(set(present_pages(va, n)) - set(pages))]
print(json.dumps({{"va": va, "touches": touches, "cached": was_cached}}), file=sys.stderr)
""".format(page=PAGE)


@pytest.mark.parametrize("tool", ["trace", "cachetop"])
def test_pmd_mapped_faults_where_anonymous_memory_was(pmd_folios, tmp_path, tool):
    """The last anonymous VMA a silent fault was in is remembered, so that
    the next anonymous faults in it cost no VMA lookup; a file mapped over
    it since must not be taken for it."""
    path, command = pmd_folios
    script = tmp_path / "where-anonymous-was.py"
    script.write_text(TOUCH_WHERE_ANONYMOUS_WAS)
    command = [command[0], str(script), *command[2:]]
    if tool == "trace":
        trace, proc, _ = run_used(tmp_path, "--", *command)
        mapped = together_mapped(kernel_report(proc.stderr))
        assert trace.kind_set(path, "access") == set(TOUCHED)
        assert trace.kind_set(path, "map") == mapped
    else:
        proc = subprocess.run([CACHETOP, "-j", "-c", " ".join(command)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        report = kernel_report(proc.stderr)
        assert_cachetop_counts(proc, path, report, together_mapped(report))

"""Fault-around that maps a large folio whole, beyond the range that
filemap:mm_filemap_map_pages names ("mm/filemap: map entire large folio
faultaround", Kiryl Shutsemau, 2025, in this machine's 6.18): the pages
beyond that range are mapped too, and `cachetop`'s mapped count and
`trace --used`'s map records must say so (issue 20's last open mismatch in
tests/cachefuzz.py; docs/tracer.md, "Large folios mapped whole").

The case: xfs (large folios in the page cache) on a fresh zram device with
read_ahead_kb 128, an 8 MiB file read whole with read() (readahead leaves
folios of 32 pages), then mapped and touched at pages 100, 700 and 1500:
each fault-around range is 16 pages (do_fault_around(), 64 KiB), each
folio 32. Ground truth: the process's own page tables
(/proc/self/pagemap), before and after each touch; the test checks that
the kernel did map beyond the range, so that the case is the one it claims.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import require_root
from cachefuzz import fault_around_range, fresh_filesystem, read_ahead_knob
from pagecache_util import PAGE, evict, write_file
from test_trace_cachetools import CACHETOP, file_row
from test_trace_used import PAGEMAP_HELPER, run_used

MiB = 1 << 20
TOUCHED = [100, 700, 1500]
FAULT_AROUND_PAGES = 16         # the default fault_around_bytes, 64 KiB

# Run under the tool: touch each page once, and print as JSON what the
# kernel's page tables say each touch mapped besides its page.
TOUCH_AND_REPORT = PAGEMAP_HELPER.format(page=PAGE) + """
import json, sys
path, pages = sys.argv[1], [int(p) for p in sys.argv[2:]]
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
va, n = map_address(path), os.fstat(fd).st_size // {page}
touches = []
for page in pages:
    before = set(present_pages(va, n))
    m[page * {page}]
    touches.append(sorted(set(present_pages(va, n)) - before - {{page}}))
print(json.dumps({{"va": va, "touches": touches}}), file=sys.stderr)
""".format(page=PAGE)


@pytest.fixture(scope="module")
def xfs_read_whole(tmp_path_factory):
    require_root()
    script = tmp_path_factory.mktemp("whole-folio") / "touch.py"
    script.write_text(TOUCH_AND_REPORT)
    with fresh_filesystem("xfs", size_mib=512) as (mountpoint, device):
        with open(read_ahead_knob(device), "w") as knob:
            knob.write("128")
        path = os.path.join(mountpoint, "f8m")
        write_file(path, 8 * MiB)
        yield path, str(script)


def read_whole(path):
    """Evict, then read the file with read(): readahead builds large folios."""
    evict(path)
    with open(path, "rb", buffering=0) as f:
        while f.read(MiB):
            pass


def kernel_view(stderr, path):
    """The mapped pages besides the touched ones, and those of them beyond
    each fault-around range, from the workload's own pagemap report."""
    report = json.loads(next(line for line in reversed(stderr.splitlines())
                             if line.startswith('{"va"')))
    npages = os.path.getsize(path) // PAGE
    mapped, beyond = set(), set()
    for page, pages in zip(TOUCHED, report["touches"]):
        first, last = fault_around_range(report["va"], page, npages, FAULT_AROUND_PAGES)
        mapped |= set(pages)
        beyond |= {p for p in pages if not first <= p <= last}
    return mapped, beyond


def test_cachetop_counts_pages_mapped_beyond_the_range(xfs_read_whole):
    path, script = xfs_read_whole
    read_whole(path)
    proc = subprocess.run([CACHETOP, "-j", "-c", f"{sys.executable} {script} {path} "
                           + " ".join(map(str, TOUCHED))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    mapped, beyond = kernel_view(proc.stderr, path)
    assert beyond, "the kernel mapped nothing beyond the fault-around ranges: not the case"
    assert summary["lost"] == 0
    row = file_row(summary, path)
    assert (row["hits"], row["misses"]) == (len(TOUCHED), 0)
    assert row["mapped"] == len(mapped), (row, len(mapped), len(beyond))


def test_trace_used_records_pages_mapped_beyond_the_range(xfs_read_whole, tmp_path):
    path, script = xfs_read_whole
    read_whole(path)
    trace, proc, _ = run_used(tmp_path, "--", sys.executable, script, path,
                              *map(str, TOUCHED))
    mapped, beyond = kernel_view(proc.stderr, path)
    assert beyond, "the kernel mapped nothing beyond the fault-around ranges: not the case"
    assert trace.kind_set(path, "access") == set(TOUCHED)
    assert trace.kind_set(path, "map") == mapped


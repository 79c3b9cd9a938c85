"""Issue 20, exactly as reported: on a fresh 1 GiB zram ext4 with
read_ahead_kb 128, a cold 64 MiB file, mapped, and one byte read at page 3
and at page 1795 (7 MiB apart) gave 1 hit and 1 miss; the kernel says 0
hits and 2 misses (both pages cold, each read by its own fault).

The cause: chunk_in_cache() (tracer/page_access.bpf.h) took a root that is
itself a leaf (a file cached only below page 64) for the leaf of any chunk,
so the fault on page 1795 (chunk 28, slot 3) read page 3's slot. Page 1000
(slot 40) or 3000 (slot 56) lie outside pages 0-31 that read-around had
cached, which is why they came out right.
"""
import mmap
import os
import sys

import pytest

from conftest import require_root
from cachefuzz import fresh_filesystem, read_ahead_knob
from pagecache_util import PAGE, evict, resident_pages, write_file
from test_trace_cachetools import cachetop_c, counts, file_row

MiB = 1 << 20
SEVEN_MIB = 7 * MiB // PAGE     # 1792 pages, 28 chunks of 64


@pytest.fixture(scope="module")
def cold_64m():
    """The issue's setup: a fresh 1 GiB zram ext4, read_ahead_kb 128, one
    64 MiB file."""
    require_root()
    with fresh_filesystem("ext4", size_mib=1024) as (mountpoint, device):
        with open(read_ahead_knob(device), "w") as knob:
            knob.write("128")
        path = os.path.join(mountpoint, "f64m")
        write_file(path, 64 * MiB)
        yield path


def touch_program(path, pages):
    return (f"{sys.executable} -c 'import mmap, os; "
            f"m = mmap.mmap(os.open(\"{path}\", os.O_RDONLY), 0, prot=mmap.PROT_READ); "
            f"[m[p * {PAGE}] for p in {pages!r}]'")


@pytest.mark.parametrize("pages", [
    [3, 1795], [3, 1794], [3, 1796],                    # wrong before the fix
    [3 + i * SEVEN_MIB for i in range(8)],              # 1 hit, 7 misses before
    [3, 35], [3, 1000], [3, 3000], [1795],              # right before too
], ids=lambda pages: "+".join(map(str, pages)) if len(pages) < 8 else "8x7MiB")
def test_cold_faults_far_apart_are_all_misses(cold_64m, pages):
    evict(cold_64m)
    assert resident_pages(cold_64m) == set()
    summary = cachetop_c(touch_program(cold_64m, pages))
    assert counts(file_row(summary, cold_64m)) == (0, len(pages))

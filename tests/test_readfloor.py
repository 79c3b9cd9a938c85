"""The read floor (analysis/pagetrace/tools/readfloor.py): one page of each
file, as the kernel counts and caches it, under a read-IOPS cap and
without one; and the largest share of an I/O cost a floor leaves.

Ground truth is the kernel's: the reads counted in the throttled cgroup
(blkio.throttle.io_serviced or io.stat) and the pages cached since the
eviction (mincore, with pages reclaimed meanwhile accounted for by
pagecache_util)."""
import os
import sys

import pytest

import loopimg

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = 4096
sys.path.insert(0, os.path.join(TOP, "analysis"))
from pagetrace.tools import readfloor, throttle  # noqa: E402

FILES = 12
RIOPS = 20


@pytest.fixture(scope="module")
def files():
    """FILES files of 3 pages on a fresh ext4 loop device, an empty file,
    a directory and a missing path; yields (the files, everything)."""
    loopimg.require_root()
    with loopimg.loop_mount("ext4", 64, ("-q", "-F", "-b", "4096")) as (mnt, _):
        paths = [os.path.join(mnt, f"f{i}") for i in range(FILES)]
        for i, path in enumerate(paths):
            loopimg.write_file(path, 3 * PAGE, seed=i)
        empty, directory = os.path.join(mnt, "empty"), os.path.join(mnt, "dir")
        open(empty, "w").close()
        os.mkdir(directory)
        yield paths, paths + [empty, directory, os.path.join(mnt, "missing"), paths[0]]


def test_only_files_with_a_page_are_read(files):
    paths, everything = files
    assert readfloor.readable_files(everything) == paths


def test_one_read_of_each_file_under_a_cap(files):
    paths, everything = files
    limits = throttle.parse_limits(f"riops={RIOPS}")
    seconds, reads = readfloor.measure(everything, limits, throttle.disks_of(paths), repeats=1)
    assert reads == FILES
    # blk-throttle lets a slice's worth (100 ms: 2 reads at 20/s) through
    # at once; the other 10 take at least 0.5 s at 20 a second.
    assert seconds >= (FILES - 2) / RIOPS * 0.9
    for path in paths:
        assert loopimg.resident_pages(path) == {0}


def test_the_device_as_it_is(files):
    paths, _ = files
    seconds, reads = readfloor.measure(paths, repeats=1)
    assert reads is None and seconds > 0
    for path in paths:
        assert loopimg.resident_pages(path) == {0}


def test_nothing_to_read(files):
    _, everything = files
    with pytest.raises(readfloor.FloorError, match="no file to read"):
        readfloor.measure(everything[FILES:-1])


@pytest.mark.unit
@pytest.mark.parametrize("selective, hot, floor, share", [
    (4.0, 0.5, 1.2, 0.8),      # the floor above the hot start
    (4.0, 0.5, 0.2, 1.0),      # below it: the hot start is the bound
    (4.0, 0.5, 4.0, 0.0),
    (0.5, 0.5, 0.1, None),     # no I/O cost
])
def test_best_share(selective, hot, floor, share):
    best = readfloor.best_share(selective, hot, floor)
    assert best == share if share is None else best == pytest.approx(share)

"""launch --batch (issue 43): the pack taken SIZE bytes of ranges at a
time, each batch sorted by (file, page), a file's ranges at most
--batch-gap pages apart merged into one WILLNEED, the pages between them
read too.

A hand-made pack over two fixture files on a loop-mounted ext4 image,
whose expected pages and requests are worked out by hand from the rule
above (not from the launcher): the kernel says what was read, mincore(2)
and cachestat(2) the pages (pagecache_util), /sys/block/loopN/stat the
device's read requests, which must equal the requests the launch's
--report counted.
"""
import json
import os
import subprocess
import sys
import time

import pytest

import loopimg
import pagecache_util
from conftest import REPO, require_root
from pagecache_util import cached_since_eviction

sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace.core import packfile  # noqa: E402

LAUNCH = os.path.join(REPO, "launch", "launch")
PAGE = os.sysconf("SC_PAGE_SIZE")

# (file, page, pages) in the pack's first-access order; file 0 is "a", 1 "b".
RANGES = [(0, 0, 1), (1, 10, 2), (0, 20, 1), (1, 0, 1), (0, 4, 1), (1, 13, 1), (0, 24, 2)]
A_PACK = {0, 4, 20, 24, 25}
B_PACK = {0, 10, 11, 13}

CASES = {
    # off: each range its own request
    "off": (["--batch", "0"], 7, 0, A_PACK, B_PACK),
    # batches of 3 pages: {a0, b10-11}, {a20, b0, a4}, {b13, a24-25};
    # no gap in them is 3 pages or less
    "3-pages-gap-3": (["--batch", f"{3 * PAGE}", "--batch-gap", "3"], 7, 0, A_PACK, B_PACK),
    # ... with gaps of 15: a4-a20 merged in the second (15 pages between)
    "3-pages-gap-15": (["--batch", f"{3 * PAGE}", "--batch-gap", "15"], 6, 15,
                       {0, *range(4, 21), 24, 25}, B_PACK),
    # one batch: a0-4, a20-25, b0, b10-13 (3 + 3 + 1 pages between)
    "all-gap-3": (["--batch", "1G", "--batch-gap", "3"], 4, 7,
                  {*range(0, 5), *range(20, 26)}, {0, *range(10, 14)}),
    # one batch, gaps of 15: a0-25 (3 + 15 + 3), b0-13 (9 + 1)
    "all-gap-15": (["--batch", "1G", "--batch-gap", "15"], 2, 31,
                   set(range(0, 26)), set(range(0, 14))),
}


@pytest.fixture(scope="module")
def fixture_pack(tmp_path_factory):
    require_root()
    subprocess.run(["make", "-s", "-C", os.path.join(REPO, "launch")], check=True)
    with loopimg.loop_mount("ext4", size_mib=32) as (point, loop):
        paths = [os.path.join(point, name) for name in ("a", "b")]
        for n, path in enumerate(paths):
            pagecache_util.write_file(path, 64 * PAGE, seed=n)
        os.sync()
        files = [packfile.identify(p) for p in paths]
        pack = packfile.Pack(packfile.FORMAT_VERSION, PAGE, int(time.time()), "test", 1, 0,
                             files, [packfile.PackRange(f, p, n, 0) for f, p, n in RANGES],
                             {})
        path = str(tmp_path_factory.mktemp("batch") / "t.pack")
        packfile.write(pack, path)
        yield path, paths, loop


def _device_reads(loop):
    with open(f"/sys/block/{os.path.basename(loop)}/stat") as f:
        return int(f.read().split()[0])


@pytest.mark.parametrize("case", CASES)
def test_batch_reads_the_pack_and_the_merged_gaps_only(fixture_pack, case, tmp_path):
    pack, paths, loop = fixture_pack
    options, requests, filled, a_pages, b_pages = CASES[case]
    pagecache_util.evict(*paths)
    assert loopimg.wait_idle(loop)
    before = _device_reads(loop)
    report = tmp_path / "report.json"
    # --verify stat: the content check would read each file's first page.
    done = subprocess.run([LAUNCH, "--mode", "concurrent", "--verify", "stat", *options,
                           "--report", str(report), pack, "--", "true"],
                          capture_output=True, text=True, timeout=60)
    # The prefetching grandchild holds stderr open until it has asked for
    # every request; WILLNEED's reads may still be in flight.
    assert done.returncode == 0, done.stderr
    assert loopimg.wait_idle(loop)
    decided = json.loads(report.read_text())
    assert (decided["requests"], decided["filled_pages"]) == (requests, filled)
    assert cached_since_eviction(paths[0]) == a_pages
    assert cached_since_eviction(paths[1]) == b_pages
    assert _device_reads(loop) - before == requests


def test_batch_goes_to_the_planner_unharmed(fixture_pack, tmp_path):
    """--mode sorted hands the launch, --batch and all, to the Python
    planner, which takes the C launcher's options, says in one line that
    its prefetch does not batch, and starts CMD."""
    pack, _, _ = fixture_pack
    done = subprocess.run([LAUNCH, "--mode", "sorted", "--batch", "4M", "--batch-gap", "8",
                           pack, "--", "sh", "-c", "exit 5"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 5, done.stderr
    assert "launch: warning: --batch: the planner's sorted prefetch does not batch" \
        in done.stderr
    assert len([line for line in done.stderr.splitlines() if "--batch" in line]) == 1

"""replay --prefetch --window: the cache it fills (mincore, the ground
truth) and the order of its system calls (strace), on a file under /var/tmp
(a block-device filesystem), as root."""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

import loopimg
from pagecache_util import PAGE, cached_since_eviction, evict, write_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLAY = os.path.join(REPO, "replay", "replay")
# Pages far apart, so that each is a request of its own (grouping merges
# only neighbours), in an order that is not the file's.
LISTED = [12, 0, 8, 4]


@pytest.fixture(scope="module")
def listed_file():
    loopimg.require_root()
    subprocess.run(["make", "-s", "-C", os.path.join(REPO, "replay")], check=True)
    root = tempfile.mkdtemp(prefix="replay-window-", dir="/var/tmp")
    data = os.path.join(root, "data")
    write_file(data, 32 * PAGE)
    trace = os.path.join(root, "list.log")
    with open(trace, "w") as f:
        f.write("# pagetrace-format: 1\n# page-size: 4096\n")
        f.writelines(f"{n} {data} {page * PAGE}\n" for n, page in enumerate(LISTED))
    yield data, trace
    shutil.rmtree(root, ignore_errors=True)


def test_window_caches_exactly_the_listed_pages(listed_file):
    data, trace = listed_file
    evict(data)
    done = subprocess.run([REPLAY, "--prefetch", "--window", "8K", "-q", trace],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert cached_since_eviction(data) == set(LISTED)


def calls_on_data(data, trace, window):
    """(call, page) of every readahead and pread64 on the data file, in
    the order the replay made them (one worker: one thread)."""
    evict(data)
    argv = [REPLAY, "--prefetch", "-q", trace] + (["--window", window] if window else [])
    done = subprocess.run(["strace", "-f", "-e", "trace=readahead,pread64", "-s", "0",
                           *argv], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    calls = []
    for line in done.stderr.splitlines():
        ahead = re.search(r"readahead\(\d+, (\d+), 4096\)", line)
        read = re.search(r"pread64\(\d+, .*, 4096, (\d+)\)", line)
        if ahead or read:
            calls.append(("readahead" if ahead else "pread",
                          int((ahead or read).group(1)) // PAGE))
    return calls


def test_window_waits_for_the_oldest_before_queueing_more(listed_file):
    """Requests of one page and an 8 KiB window: two queued at most, so
    the replay reads the oldest back (waits for it) before it queues the
    third; without a window it queues all four, then waits. Either way it
    waits for every request once."""
    a, b, c, d = LISTED
    assert calls_on_data(*listed_file, "8K") == [
        ("readahead", a), ("readahead", b), ("pread", a), ("readahead", c),
        ("pread", b), ("readahead", d), ("pread", c), ("pread", d)]
    assert calls_on_data(*listed_file, None) == [
        ("readahead", a), ("readahead", b), ("readahead", c), ("readahead", d),
        ("pread", a), ("pread", b), ("pread", c), ("pread", d)]


@pytest.mark.unit
def test_window_usage_errors():
    for argv, message in (([REPLAY, "--window", "1M", "x.log"],
                           "--window limits --prefetch: add --prefetch"),
                          ([REPLAY, "--prefetch", "--window", "0", "x.log"],
                           "replay: --window: '0': less than 1\n"),
                          ([REPLAY, "--prefetch", "--window", "lots", "x.log"],
                           "replay: --window: 'lots': not a size (bytes, K, M "
                           "or G)\n")):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, (argv, done.stderr)
        assert message in done.stderr

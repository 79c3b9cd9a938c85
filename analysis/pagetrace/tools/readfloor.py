"""The read floor of a prefetch: how fast a set of files can be read into
the page cache at all on a device, measured, and the largest share of a
start's I/O cost that any prefetch into the page cache can therefore
recover there.

Why a floor exists: the kernel reads a file's pages in requests of that
file alone (readahead builds its bios per file mapping), so a start that
needs N files cold makes at least N read requests, whoever issues them,
the start or a prefetch. Under blk-throttle's read-IOPS cap (the
cloud-3000 and hdd-150 profiles) every one of them is charged. The start
cannot end before its last file's first page is in, so its time is at
least the time N such requests take. `measure` times exactly that: one
page of each file, every request asked for at once (POSIX_FADV_WILLNEED,
readahead off), after the files are evicted, in a child started in the
throttled cgroup; the kernel's count of reads in the cgroup says how many
requests it took. It is a bound, not a plan: the pages a start needs
beyond each file's first one only add to it.

    seconds, reads = readfloor.measure(paths, limits, disks)
    readfloor.best_share(selective_s, hot_s, seconds)    # e.g. 0.81

Standard library only, like the rest of tools/: bench/bench_launch.py
runs it under sudo.
"""
import contextlib
import os
import stat
import statistics
import subprocess
import sys
import time

from . import pagecache, throttle

# The timed child: the interpreter starts before the clock does (-I -S,
# nothing imported but os, sys and time). WILLNEED reads exactly the page
# asked for (force_page_cache_ra(): no readahead window); RANDOM keeps the
# read back from starting one, should the page be gone again by then.
_CHILD = r"""
import os, sys, time
fds = [os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in sys.argv[1:]]
for fd in fds:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
started = time.perf_counter()
for fd in fds:
    os.posix_fadvise(fd, 0, 1, os.POSIX_FADV_WILLNEED)
for fd in fds:
    os.pread(fd, 1, 0)
print(time.perf_counter() - started)
"""


class FloorError(Exception):
    pass


def readable_files(paths):
    """The paths of `paths` that are regular files with at least one page
    (an empty file needs no read), each once, in their order."""
    seen, out = set(), []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if path not in seen and st.st_size > 0 and stat.S_ISREG(st.st_mode):
            seen.add(path)
            out.append(path)
    return out


def _one(paths, cgroup):
    pagecache.evict_files(paths)
    before = cgroup.counts()[0] if cgroup else 0
    with cgroup.spawning() if cgroup else contextlib.nullcontext():
        child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD, *paths],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = child.communicate(timeout=600)
    if child.returncode:
        last = err.decode("utf-8", "replace").strip().splitlines()
        raise FloorError(f"the timed reads failed: {last[-1] if last else child.returncode}")
    reads = (cgroup.counts()[0] - before) if cgroup else None
    return float(out), reads


def measure(paths, limits=None, disks=(), repeats=3, settle=0.2):
    """(median seconds, reads the kernel counted in the last repeat) of
    reading one page of each of `paths` (readable_files), all asked for at
    once, after their eviction; under `limits` (throttle.Limits) on
    `disks` in a throttled cgroup, or on the device as it is (reads None
    then: there is no cgroup to count them)."""
    paths = readable_files(paths)
    if not paths:
        raise FloorError("no file to read: none of them exists with a page")
    times, reads = [], None
    with (throttle.Cgroup(limits, disks, "readfloor") if limits
          else contextlib.nullcontext()) as cgroup:
        for _ in range(repeats):
            time.sleep(settle)
            seconds, reads = _one(paths, cgroup)
            times.append(seconds)
    return statistics.median(times), reads


def best_share(selective, hot, floor):
    """The largest share of the I/O cost (selective - hot) that a prefetch
    can recover when the start cannot end before `floor` s: it ends no
    sooner than max(floor, hot). None when there is no I/O cost."""
    if selective <= hot:
        return None
    return (selective - max(floor, hot)) / (selective - hot)

"""`pagetrace launch`, concurrent mode: the prefetch beside CMD, issued by
the launch's own (grand)child with posix_fadvise(POSIX_FADV_WILLNEED),
range by range in the pack's first-access order.

Why not `replay --prefetch` as before (measured on firefox-esr, 2026-11-26,
docs/lab/case-study-firefox.md "Deployed"): the child parsed every range into
a Pack (12 ms), wrote one trace line a page into a memfd (11 ms) and
exec'd the replayer, which parsed it again, so the first prefetch request
went out about 50 ms after CMD had started and firefox read its first
libraries cold; and the replayer reads every range back at the end to time
the prefetch (80 MiB copied, 40-60 ms of CPU on a 2-core machine beside the
start), which a launch does not need. WILLNEED is what readahead(2) does
(both go to force_page_cache_ra: exactly the pages asked for, no window
around them, cached pages skipped) and what replay falls back to.
Standard library only."""
import collections
import os

from pagetrace.core import packfile

def prefetch(pack, data, source, keep, window=None, ranges=None):
    """Asks the kernel for the pages of every range of the files `keep`
    (indexes into pack.files), in the pack's order (or those of `ranges`,
    [(file, page, pages)], in theirs); with `window` (bytes),
    at most that much asked for and not yet read back (the oldest range's
    last byte is read back, through descriptors that do no readahead,
    before more are asked for: an I/O scheduler sorts what is queued by
    sector).
    (requests, pages) asked for. A file that cannot be opened is left
    out: the launch checked it a moment ago."""
    kept, fds = set(keep), {}
    size = pack.page_size
    queued, in_flight = collections.deque(), 0
    requests = pages_asked = 0
    try:
        for file, page, pages in ranges or packfile.range_triples(data, source):
            if file not in kept:
                continue
            fd = fds.get(file)
            if fd is None:
                fd = fds[file] = _open(pack.files[file].path, window)
            if fd < 0:
                continue
            offset, length = page * size, pages * size
            if window:
                while queued and in_flight + length > window:
                    in_flight -= _read_back(queued.popleft())
            try:
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
            except OSError:
                continue
            requests += 1
            pages_asked += pages
            if window:
                queued.append((fd, offset, length))
                in_flight += length
    finally:
        for fd in fds.values():
            if fd >= 0:
                os.close(fd)
    return requests, pages_asked


def _open(path, window):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1
    if window:
        # The read-back must read nothing more than was asked for.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    return fd


def _read_back(request):
    """Waits for a range by reading one byte of its last page, the page
    WILLNEED queued last (launch/prefetch.c's read_back)."""
    fd, offset, length = request
    try:
        os.pread(fd, 1, offset + length - 1)
    except OSError:
        pass
    return length


def first_access_plan(pack, keep, gap, largest):
    """[(file, page, pages)]: the kept files' ranges merged and the gaps of
    at most `gap` pages between them filled (launch_plan.plan_ranges' plan for a
    device whose requests cost), cut into requests of at most `largest`
    pages, in the order of the first access of the pack's ranges in them
    (a request holding none keeps its place after the one before it)."""
    import bisect
    kept = set(keep)
    merged = {}
    for r in sorted((r for r in pack.ranges if r.file in kept),
                    key=lambda r: (r.file, r.page)):
        spans = merged.setdefault(r.file, [])
        if spans and r.page - (spans[-1][0] + spans[-1][1]) <= gap:
            spans[-1][1] = max(spans[-1][1], r.page + r.pages - spans[-1][0])
        else:
            spans.append([r.page, r.pages])
    requests, starts = {}, {}
    for file, spans in merged.items():
        firsts = starts[file] = []   # in page order, as the spans are
        for start, pages in spans:
            for first in range(start, start + pages, largest):
                requests[(file, first)] = min(largest, start + pages - first)
                firsts.append(first)
    order = {}
    for index, r in enumerate(pack.ranges):
        if r.file in kept:
            firsts = starts[r.file]
            key = (r.file, firsts[bisect.bisect_right(firsts, r.page) - 1])
            order.setdefault(key, index)
    placed, last = [], -1
    for file in merged:
        for first in starts[file]:
            last = order.get((file, first), last)
            placed.append((last, file, first))
    placed.sort()
    return [(file, first, requests[(file, first)]) for _, file, first in placed]

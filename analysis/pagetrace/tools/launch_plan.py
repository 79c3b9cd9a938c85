"""The planner's plans of a prefetch and what they cost on a device that
charges each read request 1/riops s and each byte 1/rbps s (blk-throttle
charges both; a seeking disk is planned as such a device): which gaps
between a file's ranges to fill, how large a request may be, the sorted
plan's cost, a model of what the start's own cold reads cost, and whether
a plan is bound by its bytes or by its requests. tools/launch.py decides
with them; docs/prefetch-packs.md says how. Standard library only.
"""

# Gaps (pages) a sorted prefetch may fill, largest requests (pages) it may
# issue (replay --max-request). Requests stay at 1 MiB: the kernel splits
# a larger readahead(2) into reads of its own, and blk-throttle charges
# each (measured: 219 requests of up to 8 MiB, 135 MiB, were 463 reads
# under riops=150, 2.96 s; 2026-11-25).
# A random 4 KiB read this slow (us) is a seek: the device is one where the
# order of reads matters (flash and a host-cached virtio disk answer in
# 0.05-0.5 ms; diskemu's hdd-7200 in 5-13 ms).
SEEK_US = 2000
GAP_CANDIDATES = (0, 1, 2, 4, 8, 16, 64, 128, 256, 512, 1024, 2048)
REQUEST_CANDIDATES = (256,)


def sorted_plan(pack, keep, riops, rbps):
    """(gap pages to fill, largest request in pages) that make the sorted
    prefetch cheapest where each request costs 1/riops s and each byte
    1/rbps s (blk-throttle charges both): filling a gap between two ranges
    saves a request and costs its bytes; larger requests save requests.
    Estimated from the gaps between the ranges of each file, without
    building every plan: requests ~ ranges + pages / largest request."""
    base = plan_ranges(pack, keep, 0, merge=True)
    gaps = sorted(page - (base[i - 1][1] + base[i - 1][2])
                  for i, (path, page, _) in enumerate(base)
                  if i and base[i - 1][0] == path)
    pages0 = sum(r[2] for r in base)
    best = None
    for gap in GAP_CANDIDATES:
        filled = [g for g in gaps if g <= gap]
        ranges, pages = len(base) - len(filled), pages0 + sum(filled)
        for largest in REQUEST_CANDIDATES:
            requests = ranges + pages // largest
            cost = max(requests / riops, pages * pack.page_size / rbps if rbps else 0)
            if best is None or cost < best[0]:
                best = (cost, gap, largest)
    return best[1], best[2]


def bandwidth_bound(pack, keep, cap, plan):
    """Whether, under `cap` (riops, rbps), `plan` (sorted_plan's gap and
    largest request) is limited by the bytes it reads rather than by its
    requests: then the start's own reads cost bytes too, and the prefetch
    goes beside the start in first-access order (planned), where the
    start's computing overlaps it, instead of being paid before it."""
    riops, rbps = cap
    if not rbps:
        return False
    _, requests, pages = plan_cost(pack, keep, *plan, riops, rbps)
    return pages * pack.page_size / rbps >= requests / riops


def plan_cost(pack, keep, gap, largest, riops, rbps):
    """(estimated seconds, requests, pages) of reading the kept files'
    ranges with gaps of up to `gap` pages filled, in requests of up to
    `largest` pages, under riops and rbps."""
    ranges = plan_ranges(pack, keep, gap, merge=True)
    requests = sum(-(-r[2] // largest) for r in ranges)
    pages = sum(r[2] for r in ranges)
    return (max(requests / riops, pages * pack.page_size / rbps if rbps else 0),
            requests, pages)


def cold_cost(pack, keep, riops, rbps, read_ahead_pages):
    """A model of what the start's own reads of the same pages cost cold:
    each used range read with the readahead window around it (ranges
    within a window of each other read together), in reads of at most
    1 MiB as the kernel issues them."""
    window = max(1, read_ahead_pages)
    return plan_cost(pack, keep, window, min(window, 256), riops, rbps)[0]


# The last pack's ranges (the object itself, held so that its identity
# stays its own), the files kept, and those ranges in page order.
_page_order = [None, None, None]


def _ranges_in_page_order(pack, keep):
    """The kept files' ranges as (path, page, pages), sorted: computed once
    per pack and files kept, since the planner builds several plans of the
    same pack (sorted_plan, bandwidth_bound, worth_it) before CMD starts."""
    if _page_order[0] is not pack.ranges or _page_order[1] != tuple(keep):
        kept = set(keep)
        _page_order[:] = [pack.ranges, tuple(keep),
                          sorted((pack.files[r.file].path, r.page, r.pages)
                                 for r in pack.ranges if r.file in kept)]
    return _page_order[2]


def plan_ranges(pack, keep, gap_pages=0, merge=False):
    """[(path, first page, pages)] of the kept files: in pack (first-access)
    order; with gap_pages (or merge), per file in page order, ranges that
    touch or overlap merged and the gaps of at most gap_pages between
    them filled (disk order is replay --sorted's)."""
    if not gap_pages and not merge:
        kept = set(keep)
        return [(pack.files[r.file].path, r.page, r.pages)
                for r in pack.ranges if r.file in kept]
    filled = []
    for path, page, pages in _ranges_in_page_order(pack, keep):
        if filled and filled[-1][0] == path and page - (filled[-1][1] + filled[-1][2]) <= gap_pages:
            last = filled[-1]
            filled[-1] = (path, last[1], max(last[2], page + pages - last[1]))
        else:
            filled.append((path, page, pages))
    return filled

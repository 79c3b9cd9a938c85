"""startup-bench: the used-page lists (USED_PAGES and MERGED_PAGES) that the
prefetch states replay, compiled from `trace --used` traces and written
through the core's trace writer."""
import os

from pagetrace.core import tracefile, tracewriter
from pagetrace.core.escape import display_path


def used_traces(trace_path, used_paths):
    """([traces], None) of the traces whose access records say which pages
    the start-up used: every --used-trace, else the --trace itself; (None,
    why) when one has none. tracefile.TraceError when one cannot be read."""
    traces = []
    for path in used_paths or [trace_path]:
        trace = tracefile.read(path)
        if not any(r.kind in ("access", "map") for r in trace.records):
            return None, (f"needs a trace with access records (the pages the "
                          f"start-up used), and {display_path(path)} has none "
                          f"(format version {trace.header.version}): record one "
                          "with trace --used -c CMD and give it as --used-trace "
                          "FILE (or as --trace)")
        traces.append(trace)
    return traces, None


def used_pages(traces, directory, name="used-pages.log", fill=0,
               preloads=False, preload_traces=()):
    """Compiles `trace --used` traces into the list that the used states
    prefetch: the read pages that have an access or map record (what
    `replay --used` keeps), each once, in the order of their first access,
    as a version 1 trace in `directory`. Done once per session, before the
    timing, as iorap compiled its traces ahead of a launch: the timed
    replay then reads this list, not the whole trace (on firefox-esr 35,554
    records instead of 141,000, 80 ms less of parsing at the start).

    Several traces (runs of the same start-up) give the union of their
    used pages, each at its earliest first access counted from the start
    of its own trace. `fill`: pages used in some of the traces and not in
    all of them vary from run to run, and a run touches others near them
    that no traced run did (firefox-esr: its unwind tables, .eh_frame); a
    miss there costs the start a fault read-around of up to read_ahead_kb,
    so the pages between two varying pages of a file at most `fill` pages
    apart are added, right after the first of the two. `preloads`: the
    forced-readahead reads (cause forced_ra: readahead(2), MADV_WILLNEED,
    fadvise WILLNEED) of the traces are added too, used or not, at the time
    of the read: the program asks for them itself, and a cold start waits
    for them; and those of `preload_traces` (a trace recorded with another
    read_ahead_kb, whose preloads read more), at the time of the first
    preload of the same file in the traces, which keep the list's clock.
    Returns (path, number of pages)."""
    first = first_accesses(traces)
    added = {}
    if fill > 0 and len(traces) > 1:
        added.update(fill_varying(traces, first, fill))
    if preloads:
        own = forced_readahead(traces)
        since = {}
        for (path, _), when in own.items():
            since[path] = min(since.get(path, when), when)
        others = forced_readahead(preload_traces, number=len(traces))
        for (path, offset), when in others.items():
            if path in since:
                others[(path, offset)] = since[path][:1] + when[1:]
        for key, when in {**others, **own}.items():
            if key not in first and key not in added:
                added[key] = when
    start = _trace_start(traces[0]) if traces else 0
    listed = sorted({**first, **added}.items(), key=lambda kv: kv[1])
    sources = ", ".join(t.source for t in traces)
    lines = [tracewriter.header(traces[0].header.page_size, fields={
        "command": f"used pages of {sources}, in first-access order"})]
    lines += [tracewriter.record_line(start + when[0], path, offset)
              for (path, offset), when in listed]
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(lines)
    return path, len(listed)


def _trace_start(trace):
    return min((r.ts_us for r in trace.records), default=0)


def first_accesses(traces):
    """{(path, offset): (us since its trace's start, trace, record, 0)} of
    the read pages with an access or map record, the earliest over the
    traces; the last field orders the pages filled in after one."""
    first = {}
    for number, trace in enumerate(traces):
        read = {(r.path, r.offset) for r in trace.records if r.kind == "read"}
        start = _trace_start(trace)
        for order, r in enumerate(trace.records):
            key = (r.path, r.offset)
            when = (r.ts_us - start, number, order, 0)
            if r.kind in ("access", "map") and key in read and (
                    key not in first or when < first[key]):
                first[key] = when
    return first


def fill_varying(traces, first, fill):
    """The pages between two varying pages (in the list from some traces,
    not from all) of a file at most `fill` pages apart, not listed yet,
    each placed right after the lower varying page, in file order."""
    used = [set(first_accesses([t])) for t in traces]
    varying = {}
    for path, offset in set.union(*used) - set.intersection(*used):
        varying.setdefault(path, []).append(offset)
    page = traces[0].header.page_size
    added = {}
    for path, offsets in varying.items():
        offsets.sort()
        for low, high in zip(offsets, offsets[1:]):
            if high - low > fill * page:
                continue
            for offset in range(low + page, high, page):
                if (path, offset) not in first:
                    added[(path, offset)] = first[(path, low)][:3] + (offset,)
    return added


def forced_readahead(traces, number=0):
    """{(path, offset): when} of the forced-readahead reads of `traces`
    (traces without a cause column have none), numbered from `number`."""
    found = {}
    for number, trace in enumerate(traces, start=number):
        columns = trace.header.columns
        if "cause" not in columns:
            continue
        # extras are the columns after timestamp, path, offset (and kind).
        cause = columns.index("cause") - (4 if "kind" in columns else 3)
        start = _trace_start(trace)
        for order, r in enumerate(trace.records):
            key = (r.path, r.offset)
            if (r.kind == "read" and len(r.extras) > cause
                    and r.extras[cause] == "forced_ra"
                    and not tracefile.is_metadata(r.path)):
                when = (r.ts_us - start, number, order, 0)
                if key not in found or when < found[key]:
                    found[key] = when
    return found

"""startup-bench: time a program's startup in controlled page-cache states.

    startup-bench --trace reads.log -n 20 -- firefox-esr --headless ...
    pagetrace startup --trace reads.log -n 20 -- firefox-esr --headless ...

States, run in interleaved order (one of each per iteration) so that drift
over the session spreads over all of them:

  cold        sync + drop_caches: the whole page cache emptied (root only)
  selective   only the trace's files evicted (POSIX_FADV_DONTNEED)
  hot         the trace's files read into the cache first
  prefetched  selective, then `replay --sorted --prefetch TRACE`, then run
  prefetched-used
              selective, then `replay --sorted --prefetch USED_PAGES` (only
              the pages the start-up used), then run
  concurrent  selective, then `replay --prefetch USED_PAGES` (first-access
              order) and the command started together, as Android's iorap
              did; timed from when both began
  prefetched-merged, concurrent-merged
              as prefetched-used and concurrent, with MERGED_PAGES;
              concurrent-merged with `replay --window` (--prefetch-window)
USED_PAGES is compiled once per session from a `trace --used` trace (the
first --used-trace), MERGED_PAGES from every --used-trace, the pages
between those that vary from run to run filled in (--fill-varying) and
the program's own preloads added (--merged-preloads): used_pages.
  launched    selective, then `pagetrace launch PACK -- CMD` (--pack): what
              users deploy, the mode chosen by the launch; timed from the
              launch's start
  launched-stale
              as launched, with a copy of PACK in which every file's inode
              is one no file has: every file stale, nothing prefetched
  simulated   selective, then `replay --first-reads TRACE` (O_DIRECT,
              original order, each page once),
              then warm the files and run: "simulated I/O + hot start",
              the 2011 check against a real (selectively) cold start

Writes every run to a CSV (docs/data-formats.md, "startup-bench runs",
pagetrace.core.startup_csv) and prints mean, median and 95% confidence interval
(Student's t) per state. Part of the standard-library core, so that it runs
under sudo with the system Python; the cache states are made with
pagetrace.tools.pagecache and the trace (its `read` records) is read by
pagetrace.core.tracefile.

The code, by job: supervise.py (the command run once), states.py (the
cache states), used_pages.py (the used-page lists), output.py (CSV and
summary), session.py (the session), cli.py (options and main).
"""
from pagetrace.tools.startup_bench.cli import main  # noqa: F401
from pagetrace.tools.startup_bench.supervise import (BenchError,  # noqa: F401
                                                     NothingToDo)
from pagetrace.tools.startup_bench.used_pages import used_pages  # noqa: F401

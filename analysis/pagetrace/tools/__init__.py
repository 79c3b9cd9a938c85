"""The tools that run under sudo on the system Python, on the core only:
`pagecache` (page-cache status, eviction, warming), `throttle`
(blk-throttle limits and cgroups), `resolve_inodes` (readpage.bt's output
to a trace) and `startup_bench` (timed start-ups in cache states).
Standard library only."""

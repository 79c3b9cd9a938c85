"""pagetrace: read page-level read traces and work out what their order cost.

The core is standard library only, so that the tools that run under sudo
with the system Python (pagecache, startup-bench, resolve-inodes) use it
too: `tracefile` (the trace format reader, docs/trace-format.md), `escape`,
`cache` (cachestat, mincore, fadvise), `stats`, `startup_csv` (the
start-up runs CSV, docs/data-formats.md), `bench`, `resolve`. Importing
the package imports none of numpy, pandas or pyarrow: the names below that
need them (`read_trace` and the other DataFrame readers) are imported on
first use.
"""
__version__ = "0.2.0"

# name -> module holding it, imported on first use: the DataFrame readers
# need pandas, and the trace reader's names are imported only when used so
# that `pagetrace launch` starts without loading it (it costs ~15 ms).
_LAZY = {
    "MalformedTraceError": "tracefile", "TraceError": "tracefile",
    "TraceWarning": "tracefile", "UnsupportedVersionError": "tracefile",
    "expected_json": "trace",
    "parse_trace_bytes": "trace", "read_trace": "trace",
    "trace_records": "trace",
    "read_plan": "formats", "read_replay_json": "formats",
    "read_startup_runs": "formats",
}

__all__ = [*_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pagetrace' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

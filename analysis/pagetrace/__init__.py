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
from pathlib import Path as _Path

# The one version of every pagetrace tool, C and Python.
__version__ = (_Path(__file__).with_name("VERSION").read_text(encoding="ascii")
               .strip())

# Names of the core, imported now (standard library only).
from .tracefile import (MalformedTraceError, TraceError,  # noqa: E402
                        TraceWarning, UnsupportedVersionError)

# name -> module holding it, imported on first use (they need pandas).
_LAZY = {
    "expected_json": "trace",
    "parse_trace_bytes": "trace", "read_trace": "trace",
    "trace_records": "trace",
    "read_plan": "formats", "read_replay_json": "formats",
    "read_startup_runs": "formats",
}

__all__ = ["MalformedTraceError", "TraceError", "TraceWarning",
           "UnsupportedVersionError",
           *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pagetrace' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

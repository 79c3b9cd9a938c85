"""pagetrace: read page-level read traces and work out what their order cost.

One package in layers (docs/architecture.md), each importing only those
below it:
- `core/`: the trace format (read, written, escaped), statistics, the
  start-up CSV, plain-text tables. Standard library only.
- `tools/`: pagecache, throttle, resolve-inodes, startup-bench: they run
  under sudo with the system Python, on the core only.
- `analysis/`: the pandas and numpy modules.
- `scale/`: Parquet and DuckDB, out of core.
- On top: `cli` (the analysis verbs, one table of them), `frontdoor`
  (`pagetrace VERB`) and `__main__`.
Importing the package imports none of numpy, pandas or pyarrow: the names
below that need them (`read_trace` and the other DataFrame readers) are
imported on first use. The flat module paths of 0.2 (`pagetrace.cache`,
...) still import, as aliases (`old_paths`), for one release.
"""
import os as _os

# The one version of every pagetrace tool, C and Python. Read without
# pathlib, which costs 11 ms at every start of `pagetrace launch`.
with open(_os.path.join(_os.path.dirname(__file__), "VERSION"), encoding="ascii") as _f:
    __version__ = _f.read().strip()

from pagetrace import old_paths as _old_paths  # noqa: E402

_old_paths.install()

# name -> module holding it, imported on first use: the DataFrame readers
# need pandas, and the trace reader's names are imported only when used so
# that `pagetrace launch` starts without loading it (it costs ~15 ms).
_LAZY = {
    "MalformedTraceError": "core.tracefile", "TraceError": "core.tracefile",
    "TraceWarning": "core.tracefile", "UnsupportedVersionError": "core.tracefile",
    "expected_json": "analysis.trace_frame",
    "parse_trace_bytes": "analysis.trace_frame",
    "read_trace": "analysis.trace_frame",
    "trace_records": "analysis.trace_frame",
    "read_plan": "analysis.formats", "read_replay_json": "analysis.formats",
    "read_startup_runs": "analysis.formats",
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

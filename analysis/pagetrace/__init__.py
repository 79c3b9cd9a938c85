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
from pathlib import Path as _Path

# The one version of every pagetrace tool, C and Python.
__version__ = (_Path(__file__).with_name("VERSION").read_text(encoding="ascii")
               .strip())

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

"""pagetrace: read page-level read traces and work out what their order cost.

The reader follows docs/trace-format.md; the other inputs (replay plans,
replay JSON, start-up runs) follow docs/data-formats.md.
"""
from .formats import read_plan, read_replay_json, read_startup_runs
from .trace import (MalformedTraceError, TraceError, TraceWarning,
                    UnsupportedVersionError, expected_json,
                    parse_trace_bytes, read_trace, trace_records)

__version__ = "0.1.0"

__all__ = [
    "MalformedTraceError", "TraceError", "TraceWarning",
    "UnsupportedVersionError", "expected_json", "parse_trace_bytes",
    "read_plan",
    "read_replay_json", "read_startup_runs", "read_trace", "trace_records",
]

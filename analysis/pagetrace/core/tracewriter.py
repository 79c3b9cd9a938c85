"""The trace format writer of the core: standard library only.

Every Python tool that writes a trace (startup-bench's used-page lists,
resolve-inodes, export, merge and its DuckDB engine, merge --min-runs,
synth) writes its header and `# end:` trailer here, and its records with
`record_line` or, where records are made in bulk, with the core's escaping
in the same field order: docs/trace-format.md has one writer per language
(this module, and the C tracer's trace_output.c with lib/escape.c).

    out.write(header(4096, fields={"command": "cp a b"}))
    out.write(record_line(ts_us, path, offset))
    out.write(trailer(pages=1, page_size=4096, files=1, duration_us=0))
"""
import os

from pagetrace.core.escape import escape
from pagetrace.core.tracefile import BASE_COLUMNS, RECORD_KINDS


def header(page_size, extra_columns=(), kinds=None, fields=None,
           clock=True):
    """The header lines, newline-terminated: version 2 when KINDS (the
    record kinds the trace may hold) is given, else version 1; then
    `page-size`, `clock` and `columns` (`kind` first among the extra ones
    in version 2), `records`, and the FIELDS (key -> value) in their order.
    `command` is escaped like a path; other values are made one line."""
    if kinds is not None:
        kinds = [k for k in RECORD_KINDS if k in kinds]
        extra_columns = ["kind", *(c for c in extra_columns if c != "kind")]
    lines = [f"# pagetrace-format: {2 if kinds is not None else 1}",
             f"# page-size: {page_size}"]
    if clock:
        lines.append("# clock: realtime-us")
        lines.append("# columns: " + " ".join((*BASE_COLUMNS, *extra_columns)))
    if kinds is not None:
        lines.append(f"# records: {' '.join(kinds)}")
    for key, value in (fields or {}).items():
        text = escape(value) if key == "command" else " ".join(
            str(value).split())
        lines.append(f"# {key}: {text}")
    return "".join(line + "\n" for line in lines)


def record_line(ts_us, path, offset, extra=()):
    """One record: `ts_us path offset [extra...]`, the path escaped (a str
    as surrogateescape decodes it, bytes, or a path object)."""
    if not isinstance(path, (str, bytes)):
        path = os.fspath(path)
    return (f"{ts_us} {escape(path)} {offset}"
            + "".join(f" {value}" for value in extra) + "\n")


def trailer(pages, page_size, files, duration_us, lost=0, accessed=None,
            mapped=None):
    """The `# end:` line; version 2 traces add `accessed` and `mapped`."""
    line = (f"# end: pages={pages} bytes={pages * page_size} files={files} "
            f"duration_us={duration_us} lost={lost}")
    if accessed is not None:
        line += f" accessed={accessed} mapped={mapped}"
    return line + "\n"

"""`pagetrace summary` out of core: per-file rows and totals from DuckDB,
or from the conversion's own summary (summary_pass.py) when it is there."""
from pagetrace.core import tracefile
from pagetrace.scale import runs as dataset_runs
from pagetrace.scale.libs import DatasetError
from pagetrace.scale.runs import session
from pagetrace.scale.summary_pass import known_summary
# --- summary, out of core ----------------------------------------------------

# Per file in one small GROUP BY path; distinct pages from a GROUP BY of
# the keys alone (not count(DISTINCT ...), which DuckDB does not spill),
# the path as its 64-bit hash: grouping 100 M records by the path's bytes
# ran out of memory at 512 MB now and then (3.5 M distinct pages), by the
# hash it takes 5 s and never did. A hash shared by two paths of the trace
# is found (the per-file rows have fewer distinct keys than paths) and the
# query is run again on the bytes.
PER_FILE_SQL = """
    WITH per_file AS (
        SELECT path, count(*) AS pages, min(timestamp_us) AS first_us,
               max(timestamp_us) AS last_us, min(line) AS first_line
        FROM {src} WHERE kind = 'read' GROUP BY path),
    unique_pages AS (
        SELECT key, count(*) AS unique_pages
        FROM (SELECT {key} AS key, "offset" FROM {src} WHERE kind = 'read'
              GROUP BY key, "offset")
        GROUP BY key)
    SELECT f.path, pages, unique_pages, first_us, last_us, first_line,
           {file_key} AS key
    FROM per_file f JOIN unique_pages u ON {file_key} = u.key
    ORDER BY first_us, first_line
"""




def per_file_rows(con, src):
    """(path, pages, unique_pages, first_us, last_us, first_line) per file
    of the read records, in order of first read."""
    rows = con.execute(PER_FILE_SQL.format(
        src=src, key=dataset_runs.PATH_KEY.format(column="path"),
        file_key=dataset_runs.PATH_KEY.format(column="f.path"))).fetchall()
    if len({row[-1] for row in rows}) < len(rows):
        rows = con.execute(PER_FILE_SQL.format(
            src=src, key="path", file_key="f.path")).fetchall()
    return [row[:-1] for row in rows]


def summary(con, runs, max_request_bytes=1 << 20):
    """What `pagetrace summary --json` says of one trace, computed in
    DuckDB and one streaming pass (requests and seeks follow trace order):
    {"totals", "files", "requests", "seeks"}. The same numbers as
    pagetrace.analysis.metrics on the in-memory frame."""
    if len(runs.parts) != 1:
        raise DatasetError("summary takes one run; "
                           f"{len(runs.parts)} given")
    page_size = runs.page_size
    part = runs.parts[0][1]
    known = known_summary(part, page_size)
    if known is None:
        rows = per_file_rows(con, runs.relation_sql())
    else:
        rows = [(path.encode("latin-1"), *numbers)
                for path, *numbers in known["files"]]
    files = []
    for path, pages, unique, first_us, last_us, _ in rows:
        files.append({"path": bytes(path).decode("utf-8", "surrogateescape"),
                      "pages": int(pages), "unique_pages": int(unique),
                      "bytes": int(pages) * page_size,
                      "first_us": int(first_us), "last_us": int(last_us),
                      "span_us": int(last_us - first_us)})
    pages = sum(f["pages"] for f in files)
    unique = sum(f["unique_pages"] for f in files)
    first = min((f["first_us"] for f in files), default=0)
    last = max((f["last_us"] for f in files), default=0)
    duration = int(last - first) if pages else 0
    # Metadata records (a device's pages) count in pages and bytes, and
    # apart; they are not files (metrics.totals).
    devices = [f for f in files if tracefile.is_metadata(f["path"])]
    totals = {"pages": int(pages), "unique_pages": int(unique),
              "bytes": int(pages) * page_size,
              "metadata_pages": sum(f["pages"] for f in devices),
              "metadata_devices": sorted(f["path"] for f in devices),
              "files": len(files) - len(devices),
              "duration_us": duration,
              "throughput_bytes_per_s": (pages * page_size / (duration / 1e6)
                                         if duration else None)}
    if known is not None and known.get("max_request_bytes") == \
            max_request_bytes:
        requests, seeks = known["requests"], known["seeks"]
    else:
        from pagetrace.scale.request_stream import trace_order
        stream = trace_order(part, page_size, max_request_bytes)
        requests, seeks = stream.requests, stream.seeks
    return {"totals": totals, "files": files, "requests": requests,
            "seeks": seeks}


def summarise_trace(args):
    """pagetrace summary through DuckDB: (the summary, the conversion's
    result or None for a Parquet input, the page size). commands.py prints
    it as it prints the in-memory engine's."""
    with session(args) as (open_runs, con):
        runs = open_runs([args.trace], strict=args.strict, summarise=True)
        result = summary(con, runs)
    converted = runs.results[0] if runs.results else None
    return result, converted, runs.page_size

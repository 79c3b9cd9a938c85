"""What each analysis verb does, engine by engine: `memory` (the pandas
reader, analysis/) and `duckdb` (out of core, scale/). Each handler takes
the parsed arguments and returns the exit status; where a verb has two
engines, both hand their answer to one function that prints it, so that
the output cannot differ by engine. cli.py's table (VERBS) says which
handlers a verb has; cli.engine_of chooses between them."""
import json
import os
import sys
import warnings

import pandas as pd

from pagetrace.analysis import (compare, export, merge, metrics, model, plots,
                                report, startup_table, trace_frame, waste)
from pagetrace.analysis.formats import read_plan, read_startup_runs
from pagetrace.core.escape import escape
from pagetrace.core.tables import text_table
from pagetrace.scale import consensus, dataset, outofcore
from pagetrace.scale import summary as scale_summary


def complain(message):
    sys.stderr.write(f"pagetrace: {message}\n")


def _read(path, strict=False):
    return trace_frame.read_trace(path, strict=strict)


def _stem(args, path):
    """-o, or the input's name without its extensions, in the current
    directory."""
    return args.output or os.path.basename(path).split(".")[0]


# --- summary ------------------------------------------------------------------

def summary_memory(args):
    frame = _read(args.trace, args.strict)
    totals = metrics.totals(frame)
    table = metrics.per_file(frame)
    seeks = metrics.trace_seek_report(frame)
    if args.json:
        files = [{"path": path, **{k: int(v) for k, v in row.items()}}
                 for path, row in table.iterrows()]
        json.dump({"trace": args.trace, "totals": totals, "files": files,
                   "requests": seeks["original"]["requests"],
                   "seeks": seeks["original"]["seeks"],
                   "malformed_lines": [line for line, _ in
                                       frame.attrs["malformed"]],
                   "trailer": frame.attrs["trailer"]},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    header, rows = report.per_file_rows(frame)
    if report.first_read_text(frame):
        sys.stdout.write(f"times: ms since the first read, "
                         f"{report.first_read_text(frame)}\n\n")
    sys.stdout.write(text_table(header, rows))
    sys.stdout.write(summary_totals_text(
        totals, seeks["original"]["requests"], seeks["original"]["seeks"],
        metrics.page_size_of(frame)))
    return 0


def summary_totals_text(totals, requests, seeks, page_size):
    """summary's last lines, the same from either engine."""
    rate = totals["throughput_bytes_per_s"]
    text = (f"\ntotal: {totals['pages']:,} pages, {totals['bytes']:,} bytes, "
            f"{totals['files']} files in {totals['duration_us'] / 1e3:,.3f} ms"
            f"{f' ({rate / 2**20:,.1f} MiB/s)' if rate else ''}; "
            f"{requests:,} requests, {seeks:,} seeks\n")
    if totals["metadata_pages"]:
        text += (f"metadata: {totals['metadata_pages']:,} pages, "
                 f"{totals['metadata_pages'] * page_size:,} bytes "
                 f"(of the total), from "
                 f"{', '.join(totals['metadata_devices'])}\n")
    return text


def summary_duckdb(args):
    result, converted, page_size = scale_summary.summarise_trace(args)
    if args.json:
        json.dump({"trace": args.trace, "totals": result["totals"],
                   "files": result["files"],
                   "requests": result["requests"], "seeks": result["seeks"],
                   "malformed_lines": converted.malformed_lines
                   if converted else None,
                   "trailer": converted.trailer if converted else None},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    t0 = min((f["first_us"] for f in result["files"]), default=0)
    if result["files"]:
        # The report's own wording of the time zero, from a one-row frame.
        when = report.first_read_text(pd.DataFrame({"ts_us": [t0]}))
        sys.stdout.write(f"times: ms since the first read, {when}\n\n")
    rows = [[escape(f["path"]), f["pages"], f["bytes"],
             (f["first_us"] - t0) / 1e3, (f["last_us"] - t0) / 1e3,
             f["span_us"] / 1e3] for f in result["files"]]
    sys.stdout.write(text_table(["path", "pages", "bytes", "first (ms)",
                                 "last (ms)", "span (ms)"], rows))
    sys.stdout.write(summary_totals_text(result["totals"], result["requests"],
                                         result["seeks"], page_size))
    return 0


# --- plot ---------------------------------------------------------------------

def plot_memory(args):
    return _plot(args, _read(args.trace), "")


def plot_duckdb(args):
    # The records, every k-th read past outofcore.PLOT_POINTS.
    with outofcore.session(args) as (open_runs, con):
        frame, note = outofcore.plot_frame(con, open_runs([args.trace]),
                                           args.mark_unused)
    return _plot(args, frame, note)


def _plot(args, frame, note):
    stem = _stem(args, args.trace)

    def save(fig, name):
        return plots.save_figure(outofcore.annotate(fig, note), name)
    written = save(plots.plot_offset_time(frame, mark_unused=args.mark_unused),
                   stem)
    if args.waterfall:
        written += save(plots.plot_waterfall(frame, args.top),
                        f"{stem}-waterfall")
    if args.zoom:
        written += save(plots.plot_offset_time(frame, zoom=True),
                        f"{stem}-zoom")
    if args.plan:
        written += plots.save_figure(
            plots.plot_plan_physical(read_plan(args.plan)), f"{stem}-plan")
    for path in written:
        print(path)
    return 0


# --- seeks --------------------------------------------------------------------

def _seek_inputs(args):
    plan = read_plan(args.plan) if args.plan else None
    hdd = model.HDDModel(transfer_bytes_per_s=args.hdd_rate * 1e6) \
        if args.hdd_rate else None
    return plan, hdd


def seeks_memory(args):
    plan, hdd = _seek_inputs(args)
    return _show_seeks(args, *report.seek_rows(_read(args.trace), plan,
                                               hdd=hdd))


def seeks_duckdb(args):
    plan, hdd = _seek_inputs(args)
    with outofcore.session(args) as (open_runs, con):
        header, rows = outofcore.seek_rows(con, open_runs([args.trace]),
                                           plan, hdd=hdd)
    return _show_seeks(args, header, rows)


def _show_seeks(args, header, rows):
    if args.json:
        json.dump([dict(zip(header, r)) for r in rows], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text_table(report.SEEK_HEADER_SHOWN, rows))
    return 0


# --- one engine: startup-table, report, compare, export, convert -------------

def startup_memory(args):
    table = startup_table.startup_table(read_startup_runs(args.runs))
    header, rows = report.startup_rows(table)
    sys.stdout.write(text_table(header, rows))
    for path in plots.save_figure(plots.plot_startup(table),
                                  _stem(args, args.runs)):
        print(path)
    return 0


def report_memory(args):
    for path in report.build_report(args.trace, args.output, args.plan,
                                    args.replay_json or (), args.startup):
        print(path)
    return 0


def compare_memory(args):
    for path in compare.build_compare(
            args.a, args.b, args.output, args.startup_a, args.startup_b,
            args.replay_json_a or (), args.replay_json_b or (),
            (args.label_a, args.label_b)):
        print(path)
    return 0


def export_memory(args):
    if args.format == "perfetto":
        return export_perfetto(args)
    if args.format:
        return export_pack_list(args)
    frame = _read(args.trace)
    if not (args.fio or args.csv or args.parquet):
        raise SystemExit("pagetrace export: give --fio, --csv, --parquet "
                         "or, for a pack, --format")
    if args.fio:
        with open(args.fio, "w", encoding="utf-8",
                  errors="surrogateescape") as out:
            export.write_fio_iolog(frame, out)
    if args.csv:
        with open(args.csv, "w", encoding="utf-8") as out:
            export.write_csv(frame, out)
    if args.parquet:
        export.write_parquet(frame, args.parquet)
    return 0


def export_perfetto(args):
    """export TRACE --format perfetto -o FILE (analysis/perfetto.py). The
    trace is read strictly: a timeline with holes would look whole."""
    from pagetrace.analysis import perfetto
    from pagetrace.core import tracefile
    if not args.output:
        complain("export: --format perfetto needs -o FILE.pftrace")
        return 2
    data = tracefile.load(args.trace)
    if data and not data.endswith(b"\n"):
        complain(f"export: {args.trace}: the last line has no end: the trace "
                 "is truncated")
        return 1
    frame = trace_frame.parse_trace_bytes(data, source=args.trace,
                                          strict=True)
    try:
        perfetto.schema()
    except perfetto.PerfettoUnavailable as err:
        complain(f"export: --format perfetto {err}")
        return 1
    with open(args.output, "wb") as out:
        perfetto.write_perfetto(frame, out)
    return 0


def export_pack_list(args):
    """export PACK --format nydus-prefetch|file-list (tools/packexport.py)."""
    from pagetrace.core import packfile
    from pagetrace.tools import packexport
    try:
        pack = packfile.read(args.trace)
    except packfile.PackError as err:
        complain(f"export: {err}")
        return 1
    out = open(args.output, "w", encoding="utf-8", errors="surrogateescape") \
        if args.output else sys.stdout
    try:
        packexport.write(pack, args.format, out, args.root,
                         warn=lambda m: complain(f"export: {m}"))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def convert_duckdb(args):
    return dataset.cmd_convert(args, complain)


# --- merge: the union in memory or out of core; the consensus -----------------

def merge_memory(args):
    merged = merge.merge_traces(_same_page_size(args.traces))
    # Names that are not UTF-8 go out as they came in.
    out = open(args.output, "w", encoding="utf-8",
               errors="surrogateescape") if args.output else sys.stdout
    try:
        export.write_trace(merged, out, header={
            "command": "pagetrace merge " + " ".join(args.traces)})
    finally:
        if out is not sys.stdout:
            out.close()
    table = merge.stability(merged)
    sys.stderr.write(text_table(
        ["runs", "pages", "share"],
        [[k, int(r.pages), float(r.share)] for k, r in table.iterrows()]))
    return 0


def merge_duckdb(args):
    if consensus.wants_consensus(args):
        return consensus.cmd_merge(args, complain)
    return outofcore.cmd_union(args)


def _same_page_size(paths):
    """The traces read, less those whose page size differs from the first
    one's (named, as the out-of-core merge names them)."""
    frames = []
    for path in paths:
        frame = _read(path)
        size = metrics.page_size_of(frame)
        first = metrics.page_size_of(frames[0]) if frames else size
        if size != first:
            warnings.warn(f"{path}: page-size {size} differs from {first} "
                          "of the runs before it; run "
                          f"'{dataset.run_name(path)}' left out")
            continue
        frames.append(frame)
    return frames


# --- diff ---------------------------------------------------------------------

def diff_memory(args):
    return _show_diff(merge.diff_traces(_read(args.a), _read(args.b)))


def diff_duckdb(args):
    with outofcore.session(args) as (open_runs, con):
        table = outofcore.diff_table(con, open_runs([args.a]),
                                     open_runs([args.b]))
    return _show_diff(table)


def _show_diff(table):
    rows = [[escape(path), int(r.only_a), int(r.only_b), int(r.both)]
            for path, r in table.iterrows()]
    rows.append(["total", int(table["only_a"].sum()),
                 int(table["only_b"].sum()), int(table["both"].sum())])
    sys.stdout.write(text_table(["path", "only A", "only B", "both"], rows))
    return 0


# --- waste --------------------------------------------------------------------

def waste_memory(args):
    return _waste(args, lambda: waste.waste_summary(_read(args.trace)))


def waste_duckdb(args):
    def summary():
        with outofcore.session(args) as (open_runs, con):
            return outofcore.waste_summary(con, open_runs([args.trace]))
    return _waste(args, summary)


def _waste(args, summary):
    try:
        summary = summary()
    except waste.NoAccessRecordsError as err:
        sys.stderr.write(f"pagetrace: {args.trace}: {err}\n")
        return 1
    if args.json:
        json.dump({"trace": args.trace, **summary}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(text_table(*waste.waste_rows(summary, args.top)))
    sys.stdout.write(waste.waste_text(summary))
    return 0

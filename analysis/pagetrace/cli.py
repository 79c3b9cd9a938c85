"""`pagetrace` command line: the front door (trace, replay, cache, startup:
see frontdoor.py) and the analysis verbs (summary, plot, seeks, report,
export, merge, diff, waste, ...)."""
import argparse
import json
import os
import sys
import warnings

from . import (compare, consensus, dataset, export, frontdoor, merge,
               metrics, model, outofcore, plots, report, startup, trace,
               waste)
from .escape import escape
from .formats import FormatError, read_plan, read_startup_runs


def _read(path, strict=False):
    return trace.read_trace(path, strict=strict)


def _complain(message):
    sys.stderr.write(f"pagetrace: {message}\n")


def cmd_summary(args):
    if dataset.use_out_of_core(args, args.trace):
        return dataset.cmd_summary(args)
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
    sys.stdout.write(report.text_table(header, rows))
    sys.stdout.write(
        f"\ntotal: {totals['pages']:,} pages, {totals['bytes']:,} bytes, "
        f"{totals['files']} files in {totals['duration_us'] / 1e3:,.3f} ms"
        f"{_rate(totals['throughput_bytes_per_s'])}; "
        f"{seeks['original']['requests']:,} requests, "
        f"{seeks['original']['seeks']:,} seeks\n")
    if totals["metadata_pages"]:
        sys.stdout.write(
            f"metadata: {totals['metadata_pages']:,} pages, "
            f"{totals['metadata_pages'] * metrics.page_size_of(frame):,} bytes "
            f"(of the total), from {', '.join(totals['metadata_devices'])}\n")
    return 0


def _rate(bytes_per_s):
    return f" ({bytes_per_s / 2**20:,.1f} MiB/s)" if bytes_per_s else ""


def _stem(args, path):
    """-o, or the input's name without its extensions, in the current
    directory."""
    return args.output or os.path.basename(path).split(".")[0]


def cmd_plot(args):
    note = ""
    if dataset.use_out_of_core(args, args.trace):
        # The records, every k-th read past outofcore.PLOT_POINTS.
        with outofcore.session(args) as (open_runs, con):
            frame, note = outofcore.plot_frame(con, open_runs([args.trace]),
                                               args.mark_unused)
    else:
        frame = _read(args.trace)
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


def cmd_seeks(args):
    plan = read_plan(args.plan) if args.plan else None
    hdd = model.HDDModel(transfer_bytes_per_s=args.hdd_rate * 1e6) \
        if args.hdd_rate else None
    if dataset.use_out_of_core(args, args.trace):
        with outofcore.session(args) as (open_runs, con):
            header, rows = outofcore.seek_rows(
                con, open_runs([args.trace]), plan, hdd=hdd)
    else:
        header, rows = report.seek_rows(_read(args.trace), plan, hdd=hdd)
    if args.json:
        json.dump([dict(zip(header, r)) for r in rows], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report.text_table(header, rows))
    return 0


def cmd_startup(args):
    table = startup.startup_table(read_startup_runs(args.runs))
    header, rows = report.startup_rows(table)
    sys.stdout.write(report.text_table(header, rows))
    for path in plots.save_figure(plots.plot_startup(table),
                                  _stem(args, args.runs)):
        print(path)
    return 0


def cmd_report(args):
    for path in report.build_report(args.trace, args.output, args.plan,
                                    args.replay_json or (), args.startup):
        print(path)
    return 0


def cmd_compare(args):
    for path in compare.build_compare(
            args.a, args.b, args.output, args.startup_a, args.startup_b,
            args.replay_json_a or (), args.replay_json_b or (),
            (args.label_a, args.label_b)):
        print(path)
    return 0


def cmd_export(args):
    if args.format:
        return packexport_main(args)
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


def packexport_main(args):
    """export PACK --format nydus-prefetch|file-list (pagetrace.packexport)."""
    from . import packexport, packfile
    try:
        pack = packfile.read(args.trace)
    except packfile.PackError as err:
        _complain(f"export: {err}")
        return 1
    out = open(args.output, "w", encoding="utf-8", errors="surrogateescape") \
        if args.output else sys.stdout
    try:
        packexport.write(pack, args.format, out, args.root,
                         warn=lambda m: _complain(f"export: {m}"))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def cmd_convert(args):
    return dataset.cmd_convert(args, _complain)


def cmd_merge(args):
    if consensus.wants_consensus(args):
        return consensus.cmd_merge(args, _complain)
    if dataset.use_out_of_core(args, *args.traces):
        return outofcore.cmd_union(args)
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
    sys.stderr.write(report.text_table(
        ["runs", "pages", "share"],
        [[k, int(r.pages), float(r.share)] for k, r in table.iterrows()]))
    return 0


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


def cmd_diff(args):
    if dataset.use_out_of_core(args, args.a, args.b):
        with outofcore.session(args) as (open_runs, con):
            table = outofcore.diff_table(con, open_runs([args.a]),
                                         open_runs([args.b]))
    else:
        table = merge.diff_traces(_read(args.a), _read(args.b))
    rows = [[escape(path), int(r.only_a), int(r.only_b), int(r.both)]
            for path, r in table.iterrows()]
    rows.append(["total", int(table["only_a"].sum()),
                 int(table["only_b"].sum()), int(table["both"].sum())])
    sys.stdout.write(report.text_table(["path", "only A", "only B", "both"],
                                       rows))
    return 0


def cmd_waste(args):
    try:
        if dataset.use_out_of_core(args, args.trace):
            with outofcore.session(args) as (open_runs, con):
                summary = outofcore.waste_summary(con,
                                                  open_runs([args.trace]))
        else:
            summary = waste.waste_summary(_read(args.trace))
    except waste.NoAccessRecordsError as err:
        sys.stderr.write(f"pagetrace: {args.trace}: {err}\n")
        return 1
    if args.json:
        json.dump({"trace": args.trace, **summary}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(report.text_table(*waste.waste_rows(summary, args.top)))
    sys.stdout.write(waste.waste_text(summary))
    return 0


TRACE_HELP = "trace file, format v1 (.xz and .gz are read too)"
PLAN_HELP = "replay --plan CSV: physical offsets of the requests"


def _out_of_core_options(p, engine=True):
    if engine:
        p.add_argument("--engine", choices=("auto", "memory", "duckdb"),
                       default="auto", help="duckdb: out of core, for any "
                       "size; memory: the in-memory reader (text traces); "
                       "auto (default): duckdb for Parquet input and for "
                       "text traces over "
                       f"{dataset.OUT_OF_CORE_TEXT_BYTES >> 20} MiB "
                       "(docs/scale.md)")
    p.add_argument("--memory-limit", default=dataset.DEFAULT_MEMORY_LIMIT,
                   metavar="SIZE", help="DuckDB's memory cap; it spills to "
                   "disk past it (default %(default)s)")
    p.add_argument("--work-dir", metavar="DIR", help="where text traces are "
                   "converted and DuckDB spills (default: $TMPDIR or /tmp)")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="pagetrace", description="pagetrace: record the pages a "
        "program reads, replay them, control the page cache, time start-ups, "
        "and analyse the traces. `pagetrace VERB --help` for each verb.",
        formatter_class=frontdoor.HelpFormatter,
        epilog="""examples:
  sudo pagetrace trace -c 'firefox-esr --headless ...' > reads.log
  pagetrace replay --sorted reads.log
  sudo pagetrace cache evict --trace reads.log
  sudo pagetrace startup --trace reads.log -n 20 -- firefox-esr --headless ...
  pagetrace summary reads.log
  pagetrace plot --zoom --waterfall reads.log
  replay/replay --plan reads.log > plan.csv && pagetrace seeks reads.log --plan plan.csv
  pagetrace startup runs.csv -o startup
  pagetrace report reads.log --plan plan.csv --replay-json orig.json \\
      --replay-json sorted.json --startup runs.csv -o report/
  pagetrace export reads.log --fio reads.iolog
  pagetrace merge run1.log run2.log run3.log -o merged.log
  pagetrace diff before.log after.log
  pagetrace compare before.log after.log --startup-a before.csv \\
      --startup-b after.csv -o compare/
  pagetrace waste --top 20 used.log      # a trace of trace --used
  sudo pagetrace pack -o app.pack -- ./app          # record a prefetch pack
  pagetrace launch app.pack -- ./app                # prefetch it and start
  pagetrace export app.pack --format nydus-prefetch -o prefetch.json""")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="VERB")
    # trace, replay, cache, startup: dispatched by frontdoor before parsing.
    frontdoor.add_front_door(parser, sub)

    p = sub.add_parser("summary", help="per-file table and totals")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="fail on the first malformed line")
    _out_of_core_options(p)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("plot", help="offset against time (PNG and SVG)")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--zoom", action="store_true",
                   help="also plot the densest region")
    p.add_argument("--plan", help="replay --plan CSV: physical position "
                   "against time, original and sorted")
    p.add_argument("--waterfall", action="store_true",
                   help="also STEM-waterfall: one bar per file from its "
                   "first to its last read")
    p.add_argument("--top", type=waste.positive_int,
                   default=plots.WATERFALL_FILES,
                   metavar="N", help="files in the waterfall, by bytes; the "
                   "rest share one row (default %(default)s)")
    p.add_argument("--mark-unused", action="store_true",
                   help="ring the pages read but never accessed (a trace "
                   "of trace --used)")
    p.add_argument("-o", "--output", help="file name stem (default: the "
                   "trace's name)")
    _out_of_core_options(p)
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("seeks", help="seeks and modelled time, original "
                       "against sorted")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--plan", help=PLAN_HELP)
    p.add_argument("--hdd-rate", type=float,
                   help="HDD transfer rate in MB/s (default 150)")
    p.add_argument("--json", action="store_true")
    _out_of_core_options(p)
    p.set_defaults(func=cmd_seeks)

    # `pagetrace startup RUNS.csv` still reaches it (frontdoor.analysis_argv).
    p = sub.add_parser(frontdoor.STARTUP_TABLE, help="start-up time per "
                       "state of a runs CSV, mean ± 95%% CI, and a chart")
    p.add_argument("runs")
    p.add_argument("-o", "--output", help="file name stem of the bar chart "
                   "(.png and .svg; default: the CSV's name)")
    p.set_defaults(func=cmd_startup)

    p = sub.add_parser("report", help="self-contained HTML report and "
                       "Markdown tables")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--plan", help=PLAN_HELP)
    p.add_argument("--replay-json", action="append",
                   help="replay --json output; give it once per run")
    p.add_argument("--startup", help="startup-bench runs CSV")
    p.add_argument("-o", "--output", required=True, help="directory")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "compare", help="two runs side by side: did the change help?",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  pagetrace compare ra128.log ra8192.log --label-a "read_ahead_kb 128" \\
      --label-b "read_ahead_kb 8192" --startup-a ra128.csv \\
      --startup-b ra8192.csv -o compare/
  pagetrace compare before.log after.log -o compare/""")
    p.add_argument("a", help="trace of run A, the baseline")
    p.add_argument("b", help="trace of run B; differences are B − A")
    p.add_argument("--startup-a", metavar="CSV",
                   help="startup-bench runs CSV of A")
    p.add_argument("--startup-b", metavar="CSV",
                   help="startup-bench runs CSV of B")
    p.add_argument("--replay-json-a", action="append", metavar="JSON",
                   help="replay --json of A; once per run")
    p.add_argument("--replay-json-b", action="append", metavar="JSON",
                   help="replay --json of B; once per run")
    p.add_argument("--label-a", help="name of A (default: its file name)")
    p.add_argument("--label-b", help="name of B (default: its file name)")
    p.add_argument("-o", "--output", required=True, help="directory")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "export", help="fio iolog v3, CSV or Parquet; a pack's list for "
        "image builders", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  pagetrace export reads.log --fio reads.iolog
  pagetrace export app.pack --format nydus-prefetch -o prefetch.json
  pagetrace export app.pack --format file-list --root /var/lib/rootfs""")
    p.add_argument("trace", help=TRACE_HELP + "; with --format, a pack "
                   "(pagetrace pack)")
    p.add_argument("--format", choices=("nydus-prefetch", "file-list"),
                   help="write the pack's list: Nydus's prefetch JSON (path "
                   "and byte ranges) or one path a line (docs/pack-format.md)")
    p.add_argument("-o", "--output", help="with --format: the file "
                   "(default: stdout)")
    p.add_argument("--root", metavar="DIR", help="with --format: the image's "
                   "root was DIR when the pack was recorded; paths relative "
                   "to it, files outside it left out")
    p.add_argument("--fio", help="write fio iolog v3 here")
    p.add_argument("--csv", help="write the records as CSV here")
    p.add_argument("--parquet", help="write the records as Parquet here")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "merge", help="union of several runs' traces, or their consensus",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  pagetrace merge run1.log run2.log run3.log -o merged.log
  pagetrace merge --min-runs 8 runs/ -o prefetch.log   # a convert dataset
  pagetrace merge --min-fraction 0.9 --used run*.log -o used.log
  replay/replay --prefetch prefetch.log""")
    p.add_argument("traces", nargs="+", help="traces, Parquet files or "
                   "directories written by pagetrace convert (one run each "
                   "run=NAME)")
    p.add_argument("-o", "--output", help="merged trace (default: stdout)")
    p.add_argument("--min-runs", type=int, metavar="K",
                   help="consensus: the pages of at least K runs, in order "
                   "of median first-access rank (docs/scale.md)")
    p.add_argument("--min-fraction", type=float, metavar="F",
                   help="consensus: the pages of at least F·N of the N runs")
    p.add_argument("--used", action="store_true",
                   help="consensus of the pages used (read and accessed, "
                   "trace --used) instead of read")
    p.add_argument("--stability", metavar="FILE",
                   help="write the stability report as JSON here")
    _out_of_core_options(p)
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser(
        "convert", help="traces to a Parquet dataset, in bounded memory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  pagetrace convert big.log -o dataset/
  pagetrace convert host*/start.log.xz --run a --run b -o runs/
  pagetrace summary dataset/run=big""")
    p.add_argument("traces", nargs="+", help=TRACE_HELP)
    p.add_argument("-o", "--output", required=True,
                   help="dataset directory (DIR/run=RUN/part-0.parquet)")
    p.add_argument("--run", action="append", metavar="NAME",
                   help="run id of each trace, in order (default: the "
                   "file name without extensions)")
    p.add_argument("--strict", action="store_true",
                   help="refuse a trace at its first malformed line")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("diff", help="pages only in A, only in B, in both")
    p.add_argument("a", help="trace or Parquet run of A")
    p.add_argument("b", help="trace or Parquet run of B")
    _out_of_core_options(p)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser(
        "waste", help="pages read but never used, per file and by cause "
        "(needs trace --used)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  tracer/trace --used -x -o used.log -c ./app && pagetrace waste used.log
  pagetrace waste --top 10 used.log
  pagetrace waste --json used.log | jq .unused_by_cause""")
    p.add_argument("trace", help="trace of trace --used (format v2)")
    p.add_argument("-j", "--json", action="store_true",
                   help="the counts as JSON (keys in docs/analysis.md)")
    p.add_argument("--top", type=waste.positive_int, metavar="N",
                   help="list only the N files with the most unused pages")
    _out_of_core_options(p)
    p.set_defaults(func=cmd_waste)
    frontdoor.add_version_options(sub)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    code = frontdoor.dispatch(argv)
    if code is not None:
        return code
    args = build_parser().parse_args(frontdoor.analysis_argv(argv))
    # A file name that is not UTF-8 is printed as the bytes it is (escape()
    # leaves bytes from 0x80 up), not a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    # Warnings (malformed lines, lost events, skipped requests) go to
    # stderr as one plain line each.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = args.func(args)
        except (trace.TraceError, FormatError, OSError,
                dataset.DatasetError) as err:
            sys.stderr.write(f"pagetrace: {err}\n")
            code = 1
        finally:
            for warning in caught:
                if issubclass(warning.category, (UserWarning,)):
                    sys.stderr.write(f"pagetrace: {warning.message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())

"""`pagetrace` command line: summary, plot, seeks, startup, report, export,
merge, diff."""
import argparse
import json
import os
import sys
import warnings

from . import (export, merge, metrics, model, plots, report, startup,
               trace)
from .escape import escape
from .formats import FormatError, read_plan, read_startup_runs


def _read(path, strict=False):
    return trace.read_trace(path, strict=strict)


def cmd_summary(args):
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
    sys.stdout.write(report.text_table(header, rows))
    sys.stdout.write(
        f"\ntotal: {totals['pages']:,} pages, {totals['bytes']:,} bytes, "
        f"{totals['files']} files in {totals['duration_us'] / 1e3:,.3f} ms"
        f"{_rate(totals['throughput_bytes_per_s'])}; "
        f"{seeks['original']['requests']:,} requests, "
        f"{seeks['original']['seeks']:,} seeks\n")
    return 0


def _rate(bytes_per_s):
    return f" ({bytes_per_s / 2**20:,.1f} MiB/s)" if bytes_per_s else ""


def _stem(args, path):
    """-o, or the input's name without its extensions, in the current
    directory."""
    return args.output or os.path.basename(path).split(".")[0]


def cmd_plot(args):
    frame = _read(args.trace)
    stem = _stem(args, args.trace)
    written = plots.save_figure(plots.plot_offset_time(frame), stem)
    if args.zoom:
        written += plots.save_figure(plots.plot_offset_time(frame, zoom=True),
                                     f"{stem}-zoom")
    if args.plan:
        written += plots.save_figure(
            plots.plot_plan_physical(read_plan(args.plan)), f"{stem}-plan")
    for path in written:
        print(path)
    return 0


def cmd_seeks(args):
    frame = _read(args.trace)
    plan = read_plan(args.plan) if args.plan else None
    hdd = model.HDDModel(transfer_bytes_per_s=args.hdd_rate * 1e6) \
        if args.hdd_rate else None
    header, rows = report.seek_rows(frame, plan, hdd=hdd)
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


def cmd_export(args):
    frame = _read(args.trace)
    if not (args.fio or args.csv or args.parquet):
        raise SystemExit("pagetrace export: give --fio, --csv or --parquet")
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


def cmd_merge(args):
    merged = merge.merge_traces([_read(p) for p in args.traces])
    out = open(args.output, "w", encoding="utf-8") if args.output \
        else sys.stdout
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


def cmd_diff(args):
    table = merge.diff_traces(_read(args.a), _read(args.b))
    rows = [[escape(path), int(r.only_a), int(r.only_b), int(r.both)]
            for path, r in table.iterrows()]
    rows.append(["total", int(table["only_a"].sum()),
                 int(table["only_b"].sum()), int(table["both"].sum())])
    sys.stdout.write(report.text_table(["path", "only A", "only B", "both"],
                                       rows))
    return 0


TRACE_HELP = "trace file, format v1 (.xz and .gz are read too)"
PLAN_HELP = "replay --plan CSV: physical offsets of the requests"


def build_parser():
    parser = argparse.ArgumentParser(
        prog="pagetrace", description="Analyse pagetrace page-read traces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  pagetrace summary reads.log
  pagetrace plot --zoom reads.log
  replay/replay --plan reads.log > plan.csv && pagetrace seeks reads.log --plan plan.csv
  pagetrace startup runs.csv -o startup
  pagetrace report reads.log --plan plan.csv --replay-json orig.json \\
      --replay-json sorted.json --startup runs.csv -o report/
  pagetrace export reads.log --fio reads.iolog
  pagetrace merge run1.log run2.log run3.log -o merged.log
  pagetrace diff before.log after.log""")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("summary", help="per-file table and totals")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="fail on the first malformed line")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("plot", help="offset against time (PNG and SVG)")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--zoom", action="store_true",
                   help="also plot the densest region")
    p.add_argument("--plan", help="replay --plan CSV: physical position "
                   "against time, original and sorted")
    p.add_argument("-o", "--output", help="file name stem (default: the "
                   "trace's name)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("seeks", help="seeks and modelled time, original "
                       "against sorted")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--plan", help=PLAN_HELP)
    p.add_argument("--hdd-rate", type=float,
                   help="HDD transfer rate in MB/s (default 150)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_seeks)

    p = sub.add_parser("startup", help="start-up time per state, mean ± "
                       "95%% CI")
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

    p = sub.add_parser("export", help="fio iolog v3, CSV or Parquet")
    p.add_argument("trace", help=TRACE_HELP)
    p.add_argument("--fio", help="write fio iolog v3 here")
    p.add_argument("--csv", help="write the records as CSV here")
    p.add_argument("--parquet", help="write the records as Parquet here")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("merge", help="union of several runs' traces")
    p.add_argument("traces", nargs="+")
    p.add_argument("-o", "--output", help="merged trace (default: stdout)")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("diff", help="pages only in A, only in B, in both")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(func=cmd_diff)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    # Warnings (malformed lines, lost events, skipped requests) go to
    # stderr as one plain line each.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = args.func(args)
        except (trace.TraceError, FormatError, OSError) as err:
            sys.stderr.write(f"pagetrace: {err}\n")
            code = 1
        finally:
            for warning in caught:
                if issubclass(warning.category, (UserWarning,)):
                    sys.stderr.write(f"pagetrace: {warning.message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())

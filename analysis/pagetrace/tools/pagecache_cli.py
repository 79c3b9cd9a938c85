"""pagecache's command line (`pagecache CMD`, `pagetrace cache CMD`): the
tables it prints, its options and `main`."""
import argparse
import json
import sys

from pagetrace import __version__
from pagetrace.core import tracefile
from pagetrace.core.escape import display_path
from pagetrace.tools.pagecache import (METHOD_CACHESTAT, METHOD_MINCORE, PROG,
                                      CacheStat, _percent, apply_to_files,
                                      choose_method, evict_fd, status_fd,
                                      warm_fd)
from pagetrace.tools.pagecache_files import (PAGE_SIZE, collect_files,
                                            read_trace, trace_notes,
                                            traced_system_pages)


# ---------------------------------------------------------------------------
# Command line.

def human_size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024.0
    return str(n)


def format_runs(runs):
    """Half-open page runs (pairs, or dicts of explain_resident) as '0-3,8'."""
    parts = []
    for run in runs:
        first, end = (run["first_page"], run["end_page"]) if isinstance(run, dict) else run
        parts.append(str(first) if end - first == 1 else f"{first}-{end - 1}")
    return ",".join(parts)


def _cell(value):
    return "-" if value is None else str(value)


def _sum_or_none(rows, key):
    values = [row[key] for row in rows]
    return None if any(v is None for v in values) else sum(values)


def status_totals(rows):
    total = {"path": "TOTAL", "size": sum(r["size"] for r in rows),
             "pages": sum(r["pages"] for r in rows)}
    for key in CacheStat._fields:
        total[key] = _sum_or_none(rows, key)
    total["percent"] = _percent(total["cached"] or 0, total["pages"])
    if rows and "traced_pages" in rows[0]:
        total["traced_pages"] = sum(r["traced_pages"] for r in rows)
        total["traced_cached"] = sum(r["traced_cached"] for r in rows)
    return total


def print_status_table(rows, total, out):
    traced = "traced_pages" in total
    head = ["SIZE", "PAGES", "CACHED", "%", "DIRTY", "WRITEBACK", "EVICTED",
            "RECENT"] + (["TRACED", "T-CACHED"] if traced else []) + ["FILE"]
    table = [head]
    for row in rows + [total]:
        cells = [human_size(row["size"]), str(row["pages"]), _cell(row["cached"]),
                 f"{row['percent']:.1f}", _cell(row["dirty"]), _cell(row["writeback"]),
                 _cell(row["evicted"]), _cell(row["recently_evicted"])]
        if traced:
            cells += [str(row["traced_pages"]), str(row["traced_cached"])]
        table.append(cells + [display_path(row["path"])])
    widths = [max(len(r[i]) for r in table) for i in range(len(head) - 1)]
    for index, cells in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)) + "  " + cells[-1],
              file=out)
        row = rows[index - 1] if 0 < index <= len(rows) else None
        if row and "resident" in row:
            print(f"    resident pages: {format_runs(row['resident']) or 'none'}",
                  file=out)


def print_evict_results(results, out):
    for r in results:
        where = display_path(r["path"])
        if r["status"] in ("refused", "unverified"):
            print(f"{r['status']:<8} {where}: {r['reason']}", file=out)
            continue
        synced = ", synced first" if r["synced"] else ""
        if r["status"] == "evicted":
            before = "?" if r["cached_before"] is None else r["cached_before"]
            print(f"evicted  {where}: {before} cached page(s) "
                  f"dropped, 0 left{synced}", file=out)
            continue
        print(f"partial  {where}: {r['cached_after']} of {r['pages']} page(s) "
              f"stayed resident{synced}", file=out)
        for piece in r["resident"]:
            count = piece["end_page"] - piece["first_page"]
            print(f"    page{'s' if count > 1 else ''} {format_runs([piece])}: "
                  f"{piece['reason']}", file=out)


def print_warm_results(results, out):
    for r in results:
        print(f"warmed   {display_path(r['path'])}: {r['cached_after']} of "
              f"{r['pages']} page(s) cached ({r['percent']:.1f}%)", file=out)


EXAMPLES = """\
examples:
  pagecache status /usr/lib/x86_64-linux-gnu/libc.so.6
  pagecache status -r /usr/lib/firefox-esr --json
  pagecache status --trace reads.log --pages
  pagecache evict --trace reads.log        # selectively cold: only these files
  pagecache warm -r /var/tmp/sapp
exit status: 0 all done; 1 some file skipped or failed, a page stayed resident
after evict, an eviction was refused, or the trace was refused (empty, binary,
unknown version, bad header); 2 bad usage.
"""


def build_parser(prog=PROG):
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Show, drop or fill the page cache of files, using "
                    "cachestat(2) (mincore(2) where the kernel lacks it).",
        epilog=EXAMPLES)
    parser.add_argument("-V", "--version", action="version",
                        version=f"%(prog)s (pagetrace) {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{status,evict,warm}")
    sub.required = True
    helps = {"status": "per-file table of cached, dirty, writeback and evicted pages",
             "evict": "fsync, drop with POSIX_FADV_DONTNEED, verify, explain what stayed",
             "warm": "read the files into the page cache"}
    for name, text in helps.items():
        p = sub.add_parser(name, help=text, description=text, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("files", nargs="*", metavar="FILE")
        p.add_argument("--trace", metavar="TRACE",
                       help="take the files from the read records of a "
                            "pagetrace trace (format version 1 or 2)")
        p.add_argument("-r", "--recursive", action="store_true",
                       help="walk directories")
        p.add_argument("--follow", action="store_true",
                       help="follow symbolic links (default: skip them)")
        p.add_argument("-V", "--version", action="version",
                       version=f"{prog} (pagetrace) {__version__}")
        p.add_argument("-j", "--json", action="store_true",
                       help="one JSON object on stdout instead of text")
        p.add_argument("--method", choices=("auto", METHOD_CACHESTAT, METHOD_MINCORE),
                       default="auto",
                       help="how to read cache state (default: cachestat if the "
                            "kernel has it, else mincore)")
        if name == "status":
            p.add_argument("--pages", action="store_true",
                           help="also list the runs of resident pages of each file")
        if name == "evict":
            p.add_argument("--no-sync", action="store_true",
                           help="refuse files with dirty pages instead of fsyncing them")
    return parser


def gather_targets(args):
    """(paths, problems, notes, trace) from FILEs or --trace."""
    if args.trace:
        trace = read_trace(args.trace)
        paths, problems = collect_files(list(trace.pages), False, args.follow)
        return paths, problems, trace_notes(trace), trace
    paths, problems = collect_files(args.files, args.recursive, args.follow)
    return paths, problems, [], None


def run_command(args, out=sys.stdout, err=sys.stderr):
    method, method_note = choose_method(args.method)
    paths, problems, notes, trace = gather_targets(args)
    if method_note:
        notes.insert(0, method_note)
    if args.command == "status":
        results, more = [], []
        for path in paths:
            traced = traced_system_pages(trace, path) if trace else None
            rs, ps = apply_to_files(status_fd, [path], args.follow, method=method,
                                    traced_pages=traced, list_pages=args.pages)
            results += rs
            more += ps
    elif args.command == "evict":
        results, more = apply_to_files(evict_fd, paths, args.follow, method=method,
                                       sync=not args.no_sync)
    else:
        results, more = apply_to_files(warm_fd, paths, args.follow, method=method)
    problems += more
    for note in notes:
        print(f"{args.prog}: {note}", file=err)
    for problem in problems:
        print(f"{args.prog}: {problem}", file=err)
    report(args, method, results, problems, notes, out)
    incomplete = any(r.get("status") in ("partial", "refused", "unverified")
                     for r in results)
    return 1 if problems or incomplete else 0


def report(args, method, results, problems, notes, out):
    document = {"tool": PROG, "command": args.command, "method": method,
                "page_size": PAGE_SIZE, "files": results,
                "errors": [{"path": p.path, "error": p.message} for p in problems],
                "notes": notes}
    if args.command == "status":
        document["total"] = status_totals(results)
    if args.json:
        json.dump(document, out, indent=1)
        out.write("\n")
        return
    if args.command == "status":
        print_status_table(results, document["total"], out)
    elif args.command == "evict":
        print_evict_results(results, out)
    else:
        print_warm_results(results, out)
    print(f"method: {method}(2)", file=out)


def main(argv=None, prog=PROG):
    """The command line; `prog` names the tool in messages (`pagecache`,
    or `pagetrace cache` from the front door)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.prog = prog
    if bool(args.files) == bool(args.trace):
        parser.error("give either FILEs or --trace TRACE (one of the two)")
    if args.trace and args.recursive:
        parser.error("-r does not apply to --trace")
    try:
        return run_command(args)
    except tracefile.TraceError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

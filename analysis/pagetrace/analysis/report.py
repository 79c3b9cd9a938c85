"""Text renderings (plain, Markdown, HTML) of the analysis tables, and the
self-contained HTML report; its first screen, the findings, is
findings.py's.

Times a person reads are milliseconds since the trace's first read; raw
microsecond timestamps stay in the machine formats (`--json`, Parquet)."""
import base64
import datetime
import html
import io
import math
import os

from pagetrace.analysis import (metrics, model, plots,
                                startup_table as startup, waste)
from pagetrace.core.escape import escape
from pagetrace.core.tables import Bytes, html_table, markdown_table
from pagetrace.analysis.formats import (read_plan, read_replay_json,
                                        read_startup_runs)
from pagetrace.analysis.trace_frame import read_trace
from pagetrace.analysis.findings import findings, findings_html, findings_markdown

# --- the tables -------------------------------------------------------

def first_read_text(frame):
    """`YYYY-MM-DD HH:MM:SS.mmm UTC`: when the first read happened, the zero
    of every time in the report (empty for a trace without reads)."""
    t0 = plots.first_read_us(frame)
    if t0 is None:
        return ""
    when = datetime.datetime.fromtimestamp(t0 / 1e6, datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def per_file_rows(frame, limit=None):
    """Per file (in order of first read, or the `limit` most read): pages,
    bytes, first and last read in ms since the trace's first read, span."""
    reads = metrics.read_records(frame)
    table = metrics.per_file(reads)
    if limit:
        table = table.sort_values("pages", ascending=False,
                                  kind="stable").head(limit)
    t0 = plots.first_read_us(frame) or 0
    header = ["path", "pages", "bytes", "first (ms)", "last (ms)",
              "span (ms)"]
    # Escaped like in traces: a name with a newline or invalid UTF-8 stays
    # on one line and writable.
    rows = [[escape(path), int(r.pages), int(r.bytes),
             (int(r.first_us) - t0) / 1e3, (int(r.last_us) - t0) / 1e3,
             int(r.span_us) / 1e3]
            for path, r in table.iterrows()]
    return header, rows


# The distance is a Bytes: KiB/MiB/GiB in a table, bytes in JSON (the
# column keeps its name for --json readers).
SEEK_HEADER = ["space", "order", "requests", "seeks", "seek distance (bytes)",
               "HDD model (ms)", "SSD model (ms)"]
SEEK_HEADER_SHOWN = [h.replace(" (bytes)", "") for h in SEEK_HEADER]


def seek_rows(frame, plan=None, hdd=None, ssd=None):
    """Seeks and modelled time, original against sorted: in file-offset
    space from the trace, and on disk from the plan if there is one."""
    header = SEEK_HEADER
    spaces = [("file offsets", metrics.trace_seek_report(frame),
               model.predict_trace(frame, hdd, ssd))]
    if plan is not None:
        spaces.append(("physical (plan)", metrics.plan_seek_report(plan),
                       model.predict_plan(plan, hdd, ssd)))
    rows = []
    for space, report, predicted in spaces:
        for order in ("original", "sorted"):
            s = report[order]
            rows.append([space, order, s["requests"], s["seeks"],
                         Bytes(s["seek_distance_bytes"]),
                         predicted[order]["hdd_s"] * 1e3,
                         predicted[order]["ssd_s"] * 1e3])
    return header, rows


def replay_rows(runs):
    header = ["run", "order", "requests", "bytes", "seeks", "elapsed (ms)",
              "MiB/s"]
    rows = [[os.path.basename(r["source"]), r["order"], r["requests"],
             Bytes(r["bytes"]), r.get("seeks", 0), r["elapsed_s"] * 1e3,
             r.get("mib_per_s", math.nan)] for r in runs]
    return header, rows


def fit_rows(runs):
    header = ["model", "coefficients", "RMS error (ms)", "max error",
              "determined"]
    rows = []
    for kind in ("hdd", "ssd"):
        fit = model.fit_runs(runs, kind)
        coefficients = ", ".join(f"{k}: {v:.3g} s" for k, v in
                                 fit.coefficients.items())
        rows.append([kind, coefficients, fit.rms_error_s * 1e3,
                     f"{fit.max_relative_error * 100:.1f}%",
                     "yes" if fit.determined else "no (runs ≤ parameters)"])
    return header, rows


def startup_rows(table):
    header = ["state", "runs", "failed", "elapsed", "total"]
    rows = [[state, int(r.runs), int(r.failed),
             startup.format_mean_ci(r.elapsed_s_mean, r.elapsed_s_pm_pct),
             startup.format_mean_ci(r.total_s_mean, r.total_s_pm_pct)]
            for state, r in table.iterrows()]
    return header, rows


# --- the report -------------------------------------------------------

STYLE = (
    "body{font-family:sans-serif;max-width:74em;margin:auto;padding:0 1em;"
    "line-height:1.35}"
    "h1{font-size:1.4em;margin:.5em 0 .1em}h2{font-size:1.15em;"
    "margin-top:1.4em}.sub{color:#555;margin:0 0 .6em;font-size:.9em}"
    "ul.findings{padding-left:1.1em;margin:.3em 0}"
    "ul.findings li{margin:.25em 0}"
    ".source{color:#666;font-size:.85em}"
    ".verdict{font-size:.8em;padding:0 .35em;border-radius:3px;"
    "white-space:nowrap}.v-measured{background:#dfd}.v-model{background:#eef}"
    ".v-weak{background:#fed}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;"
    "padding:2px 6px;text-align:right}td:first-child{text-align:left}"
    "img{max-width:100%}")


def _embedded_png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def write_csv_table(path, header, rows):
    """A table as CSV for people (relative ms; paths escaped, commas too,
    as in docs/data-formats.md, so no quoting)."""
    def cell(value):
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.3f}"
        return str(value).replace(",", "\\054")
    with open(path, "w", encoding="utf-8") as out:
        out.write(",".join(header) + "\n")
        for row in rows:
            out.write(",".join(cell(c) for c in row) + "\n")
    return path


class Page:
    """Sections of a report, rendered to HTML and Markdown in order."""

    def __init__(self, title, subtitle=""):
        self.title, self.subtitle = title, subtitle
        self.markdown = [f"# {title}\n\n" + (f"{subtitle}\n" if subtitle
                                              else "")]
        self.body = [f"<h1>{html.escape(title)}</h1>" +
                     (f"<p class=\"sub\">{html.escape(subtitle)}</p>"
                      if subtitle else "")]
        self.written = []

    def findings(self, found, heading="Findings"):
        self.markdown.append(f"\n## {heading}\n\n" + findings_markdown(found))
        self.body.append(f"<h2 id=\"findings\">{html.escape(heading)}</h2>"
                         + findings_html(found))

    def table(self, name, header, rows, note=""):
        self.markdown.append(f"\n## {name}\n\n" + (f"{note}\n\n" if note
                                                    else "")
                             + markdown_table(header, rows))
        self.body.append(f"<h2>{html.escape(name)}</h2>" +
                         (f"<p class=\"sub\">{html.escape(note)}</p>"
                          if note else "") + html_table(header, rows))

    def paragraph(self, name, text, href=None, link_text=None):
        """A section of one sentence, with a link (a file beside the
        report) in it where given."""
        link_md = f"[{link_text}]({href})" if href else ""
        link_html = (f"<a href=\"{html.escape(href)}\">"
                     f"{html.escape(link_text)}</a>") if href else ""
        self.markdown.append(f"\n## {name}\n\n"
                             + text.format(link=link_md) + "\n")
        self.body.append(f"<h2>{html.escape(name)}</h2><p>"
                         + html.escape(text).format(link=link_html) + "</p>")

    def figure(self, out_dir, name, stem, fig):
        self.written += plots.save_figure(fig, os.path.join(out_dir, stem))
        self.markdown.append(f"\n## {name}\n\n![{name}]({stem}.svg)\n")
        self.body.append(f"<h2>{html.escape(name)}</h2><img alt=\""
                         f"{html.escape(name)}\" src=\"data:image/png;base64,"
                         f"{_embedded_png(fig)}\">")

    def write(self, out_dir):
        html_path = os.path.join(out_dir, "index.html")
        with open(html_path, "w", encoding="utf-8") as out:
            out.write("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
                      "<meta name=\"viewport\" content=\"width=device-width\">"
                      f"<title>{html.escape(self.title)}</title><style>"
                      f"{STYLE}</style></head><body>{''.join(self.body)}"
                      "</body></html>\n")
        md_path = os.path.join(out_dir, "report.md")
        with open(md_path, "w", encoding="utf-8") as out:
            out.write("".join(self.markdown))
        return [html_path, md_path] + self.written


def trace_subtitle(frame):
    """What was traced and when time zero is."""
    command = (frame.attrs.get("header") or {}).get("command")
    first = first_read_text(frame)
    parts = [f"command: {command}"] if command else []
    if first:
        parts.append(f"times are ms since the first read, {first}")
    return "; ".join(parts)


TIMELINE = "timeline.pftrace"


def timeline(page, frame, out_dir):
    """The trace as a Perfetto timeline beside the report, and a section
    linking to it; without the perfetto package, a section saying how to
    get it. Returns the paths written."""
    from pagetrace.analysis import perfetto
    name = "Timeline in Perfetto"
    try:
        perfetto.schema()
    except perfetto.PerfettoUnavailable:
        page.paragraph(name, "No timeline: pagetrace export --format "
                       "perfetto needs the perfetto package (pip install "
                       "'pagetrace[perfetto]').")
        return []
    path = os.path.join(out_dir, TIMELINE)
    with open(path, "wb") as out:
        perfetto.write_perfetto(frame, out)
    page.paragraph(name, "Every read request, access and map of the trace "
                   "on a track per thread: {link}, to open at "
                   "https://ui.perfetto.dev (docs/perfetto.md).",
                   href=TIMELINE, link_text=TIMELINE)
    return [path]


def build_report(trace_path, out_dir, plan_path=None, replay_paths=(),
                 startup_path=None):
    """Write `out_dir`/index.html (images embedded, no other file needed),
    `out_dir`/report.md (the same text), `out_dir`/files.csv (the per-file
    table, relative ms) and the figures as PNG and SVG. The findings come
    first, the tables after the figures, the cost-model fit last (an
    appendix: with few runs it says nothing). Returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    frame = read_trace(trace_path)
    name = os.path.basename(str(trace_path))
    plan = read_plan(plan_path) if plan_path else None
    replays = [read_replay_json(p) for p in replay_paths]
    runs = read_startup_runs(startup_path) if startup_path else None
    page = Page(f"pagetrace report: {name}", trace_subtitle(frame))
    page.findings(findings(frame, name, plan, replays, runs,
                           os.path.basename(str(startup_path or ""))))
    page.figure(out_dir, "Which files, when", "waterfall",
                plots.plot_waterfall(frame))
    written = timeline(page, frame, out_dir)
    if runs is not None:
        table = startup.startup_table(runs)
        page.figure(out_dir, "Start-up time", "startup",
                    plots.plot_startup(table))
    has_access = waste.has_access_records(frame)
    page.figure(out_dir, "Reads over time", "offset-time",
                plots.plot_offset_time(frame, mark_unused=has_access))
    page.figure(out_dir, "Densest region", "offset-time-zoom",
                plots.plot_offset_time(frame, zoom=True))
    if has_access:
        page.figure(out_dir, "Used against read, per file", "used-vs-read",
                    plots.plot_used_vs_read(
                        waste.page_usage(frame),
                        metrics.page_size_of(frame)))
    if plan is not None:
        page.figure(out_dir, "Physical position, original against sorted",
                    "plan-physical", plots.plot_plan_physical(plan))
    if runs is not None:
        page.table("Start-up time per cache state (mean ± 95% CI)",
                   *startup_rows(table))
    if replays:
        page.table("Replay runs", *replay_rows(replays))
    page.table("Seeks and modelled time", SEEK_HEADER_SHOWN,
               seek_rows(frame, plan)[1])
    totals = metrics.totals(metrics.read_records(frame))
    page.table("Totals", ["pages", "bytes", "files", "duration (ms)"],
               [[totals["pages"], totals["bytes"], totals["files"],
                 totals["duration_us"] / 1e3]])
    header, rows = per_file_rows(frame)
    page.table("Files (most pages first, top 30)",
               *per_file_rows(frame, limit=30),
               note=f"All {len(rows):,} files: files.csv.")
    written.append(write_csv_table(os.path.join(out_dir, "files.csv"),
                                   header, rows))
    if replays:
        page.table("Appendix: cost model fitted to the replay runs",
                   *fit_rows(replays),
                   note="With no more runs than parameters the fit is exact "
                   "and says nothing about the model (determined: no).")
    return page.write(out_dir) + written

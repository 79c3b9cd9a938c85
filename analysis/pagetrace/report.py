"""Text renderings (plain, Markdown, HTML) of the analysis tables, and the
self-contained HTML report."""
import base64
import html
import io
import math
import os


from . import metrics, model, plots, startup
from .escape import escape
from .formats import read_plan, read_replay_json, read_startup_runs
from .trace import read_trace


def _cell(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(header, rows):
    """A GitHub-flavoured Markdown table; `|` in cells is escaped."""
    def line(cells):
        return "| " + " | ".join(_cell(c).replace("|", "\\|")
                                 for c in cells) + " |"
    out = [line(header), "| " + " | ".join("---" for _ in header) + " |"]
    out += [line(r) for r in rows]
    return "\n".join(out) + "\n"


def html_table(header, rows):
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>"
                                    for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(header, rows):
    """Aligned plain-text table for the terminal."""
    cells = [[str(h) for h in header]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    return "\n".join(lines) + "\n"


# --- the tables -------------------------------------------------------

def per_file_rows(frame, limit=None):
    table = metrics.per_file(frame)
    if limit:
        table = table.sort_values("pages", ascending=False,
                                  kind="stable").head(limit)
    header = ["path", "pages", "bytes", "first_us", "last_us", "span_us"]
    # Escaped like in traces: a name with a newline or invalid UTF-8 stays
    # on one line and writable.
    rows = [[escape(path), int(r.pages), int(r.bytes), int(r.first_us),
             int(r.last_us), int(r.span_us)]
            for path, r in table.iterrows()]
    return header, rows


def seek_rows(frame, plan=None, hdd=None, ssd=None):
    """Seeks and modelled time, original against sorted: in file-offset
    space from the trace, and on disk from the plan if there is one."""
    header = ["space", "order", "requests", "seeks", "seek distance (bytes)",
              "HDD model (ms)", "SSD model (ms)"]
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
                         s["seek_distance_bytes"],
                         predicted[order]["hdd_s"] * 1e3,
                         predicted[order]["ssd_s"] * 1e3])
    return header, rows


def replay_rows(runs):
    header = ["run", "order", "requests", "bytes", "seeks", "elapsed (ms)",
              "MiB/s"]
    rows = [[os.path.basename(r["source"]), r["order"], r["requests"],
             r["bytes"], r.get("seeks", 0), r["elapsed_s"] * 1e3,
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

def _embedded_png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def build_report(trace_path, out_dir, plan_path=None, replay_paths=(),
                 startup_path=None):
    """Write `out_dir`/index.html (images embedded, no other file needed),
    `out_dir`/report.md (the same tables) and the figures as PNG and SVG.
    Returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    frame = read_trace(trace_path)
    plan = read_plan(plan_path) if plan_path else None
    runs = [read_replay_json(p) for p in replay_paths]
    sections = []  # (title, header, rows)
    figures = []   # (title, stem, figure)
    totals = metrics.totals(frame)
    sections.append(("Totals", ["pages", "bytes", "files", "duration (us)"],
                     [[totals["pages"], totals["bytes"], totals["files"],
                       totals["duration_us"]]]))
    sections.append(("Files (most pages first, top 30)",
                     *per_file_rows(frame, limit=30)))
    sections.append(("Seeks and modelled time", *seek_rows(frame, plan)))
    figures.append(("Reads over time", "offset-time",
                    plots.plot_offset_time(frame)))
    figures.append(("Densest region", "offset-time-zoom",
                    plots.plot_offset_time(frame, zoom=True)))
    if plan is not None:
        figures.append(("Physical position, original against sorted",
                        "plan-physical", plots.plot_plan_physical(plan)))
    if runs:
        sections.append(("Replay runs", *replay_rows(runs)))
        sections.append(("Cost model fitted to the replay runs",
                         *fit_rows(runs)))
    if startup_path:
        table = startup.startup_table(read_startup_runs(startup_path))
        sections.append(("Start-up time per cache state (mean ± 95% CI)",
                         *startup_rows(table)))
        figures.append(("Start-up time", "startup",
                        plots.plot_startup(table)))
    written = []
    title = f"pagetrace report: {os.path.basename(str(trace_path))}"
    markdown = [f"# {title}\n"]
    body = [f"<h1>{html.escape(title)}</h1>"]
    for name, header, rows in sections:
        markdown.append(f"\n## {name}\n\n" + markdown_table(header, rows))
        body.append(f"<h2>{html.escape(name)}</h2>" + html_table(header, rows))
    for name, stem, fig in figures:
        written += plots.save_figure(fig, os.path.join(out_dir, stem))
        markdown.append(f"\n## {name}\n\n![{name}]({stem}.svg)\n")
        body.append(f"<h2>{html.escape(name)}</h2><img alt=\"{html.escape(name)}\""
                    f" src=\"data:image/png;base64,{_embedded_png(fig)}\">")
    style = ("body{font-family:sans-serif;max-width:70em;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;"
             "padding:2px 6px;text-align:right}td:first-child{text-align:left}"
             "img{max-width:100%}")
    html_path = os.path.join(out_dir, "index.html")
    with open(html_path, "w", encoding="utf-8") as out:
        out.write(f"<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
                  f"<title>{html.escape(title)}</title><style>{style}</style>"
                  f"</head><body>{''.join(body)}</body></html>\n")
    md_path = os.path.join(out_dir, "report.md")
    with open(md_path, "w", encoding="utf-8") as out:
        out.write("".join(markdown))
    return [html_path, md_path] + written

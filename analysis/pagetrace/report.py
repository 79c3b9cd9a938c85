"""Text renderings (plain, Markdown, HTML) of the analysis tables, the
findings (the report's first screen: what the start read, what its I/O
cost, what order or prefetching would save, each with its interval and its
source), and the self-contained HTML report.

Times a person reads are milliseconds since the trace's first read; raw
microsecond timestamps stay in the machine formats (`--json`, Parquet)."""
import base64
import datetime
import html
import io
import math
import os
from dataclasses import dataclass, field

from . import metrics, model, plots, startup, stats, waste
from .escape import escape
from .formats import read_plan, read_replay_json, read_startup_runs
from .trace import read_trace

MIB = 1 << 20


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

def first_read_text(frame):
    """`2026-11-22 04:15:31.123 UTC`: when the first read happened, the zero
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


# --- findings ---------------------------------------------------------

# Verdicts, in words a reader takes at face value.
MEASURED = "measured"
NO_DIFFERENCE = "no measurable difference (the interval includes 0)"
UNDETERMINED = "undetermined (fewer than two runs)"
SINGLE_RUN = "one run each: no interval"
MODELLED = "model, not measured"
NOT_MEASURED = "not measured"
INCOMPLETE = "incomplete trace"


@dataclass
class Finding:
    """One statement of the findings: `text` with its numbers, `source`
    (where they come from), `verdict` (how sure), `values` (the numbers, for
    --json and tests)."""
    topic: str
    text: str
    source: str
    verdict: str
    values: dict = field(default_factory=dict)


def difference_ci(a, b, confidence=0.95):
    """mean(b) − mean(a) and its confidence interval (Welch's t, unequal
    variances). Returns (difference, low, high); the interval is NaN with
    fewer than two values on either side."""
    if not len(a) or not len(b):
        return math.nan, math.nan, math.nan
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    diff = mean_b - mean_a
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    var_a = sum((v - mean_a) ** 2 for v in a) / (len(a) - 1) / len(a)
    var_b = sum((v - mean_b) ** 2 for v in b) / (len(b) - 1) / len(b)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return diff, diff, diff
    # Welch–Satterthwaite degrees of freedom.
    df = (var_a + var_b) ** 2 / (
        (var_a ** 2 / (len(a) - 1) if var_a else 0.0)
        + (var_b ** 2 / (len(b) - 1) if var_b else 0.0))
    half = stats.t_quantile(0.5 + confidence / 2.0, df) * se
    return diff, diff - half, diff + half


def verdict_of(low, high):
    """MEASURED, NO_DIFFERENCE or UNDETERMINED for a difference's interval."""
    if math.isnan(low) or math.isnan(high):
        return UNDETERMINED
    return NO_DIFFERENCE if low <= 0 <= high else MEASURED


def ms(seconds, signed=False):
    """`1,234 ms` / `+12.3 ms`: seconds as ms, precision for people."""
    value = seconds * 1e3
    text = f"{value:+,.1f}" if signed else f"{value:,.1f}"
    if round(abs(value), 1) >= 100:
        text = f"{value:+,.0f}" if signed else f"{value:,.0f}"
    return text.replace("-", "−") + " ms"


def interval_text(low, high, prefix="95% CI "):
    """`95% CI −120 to +108 ms`, or `no interval` when unknown."""
    if math.isnan(low):
        return "no interval"
    return f"{prefix}{ms(low, True)[:-3]} to {ms(high, True)}"


def pct(fraction):
    """`+4.8%` / `−4.8%` (a real minus sign, as in the ms figures)."""
    return f"{fraction:+.1%}".replace("-", "−")


def ok_times(runs, state, column="total_s"):
    """The `column` of the ok runs of one state, as a list of seconds."""
    ok = runs[(runs["state"] == state) & (runs["status"] == "ok")]
    return [float(v) for v in ok[column].dropna()]


def _mib(nbytes):
    """`412.5 MiB`, or KiB below a MiB."""
    if nbytes < MIB:
        return f"{nbytes / 1024:,.0f} KiB"
    return f"{nbytes / MIB:,.1f} MiB"


def read_finding(frame, name):
    reads = metrics.read_records(frame)
    page_size = metrics.page_size_of(frame)
    nbytes = len(reads) * page_size
    # Metadata records (a device node, cause metadata) are the filesystem's
    # reads, not a file's: counted in the total, named apart.
    metadata = metrics.metadata_rows(reads)
    files = reads["path"][~metadata].astype(str).value_counts()
    span_ms = (int(reads["ts_us"].max()) - int(reads["ts_us"].min())) / 1e3 \
        if len(reads) else 0.0
    names = plots._short_names(files.index[:3])
    top = ", ".join(f"{names[path]} {_mib(pages * page_size)}"
                    for path, pages in files.head(3).items())
    meta_text = (f" and {_mib(int(metadata.sum()) * page_size)} of filesystem metadata"
                 if metadata.any() else "")
    text = (f"The start read {_mib(nbytes)} ({len(reads):,} pages) from "
            f"{len(files):,} files{meta_text} over {ms(span_ms / 1e3)}"
            + (f"; most from {top}." if top else "."))
    trailer = frame.attrs.get("trailer") or {}
    lost = int(trailer.get("lost", 0) or 0)
    if not trailer:
        source = f"trace {name}: {len(reads):,} read records; no trailer " \
            "(the tracer did not finish)"
    else:
        source = f"trace {name}: {len(reads):,} read records; trailer " \
            f"lost={lost}"
    return Finding("read", text, source, INCOMPLETE if lost else MEASURED,
                   {"bytes": nbytes, "pages": len(reads),
                    "files": int(len(files)), "span_ms": span_ms,
                    "metadata_pages": int(metadata.sum()),
                    "lost": lost})


# How the reference state reads in a sentence.
STATE_WORDS = {"selective": "selectively cold", "cold": "cold"}


def _reference_state(runs):
    """The real cold start the others are compared with: `selective` (only
    the traced files evicted, the same cold set the trace saw), else
    `cold`."""
    for state in ("selective", "cold"):
        if ok_times(runs, state):
            return state
    return None


def io_cost_finding(runs, name):
    ref = _reference_state(runs)
    hot = ok_times(runs, "hot")
    if ref is None or not hot:
        return Finding("I/O cost", "The I/O cost of the start is not known: "
                       "it needs cold (selective) and hot start-ups.",
                       f"{name}: no ok {'hot' if ref else 'cold'} runs",
                       NOT_MEASURED)
    cold = ok_times(runs, ref)
    diff, low, high = difference_ci(hot, cold)
    mean_cold = sum(cold) / len(cold)
    share = diff / mean_cold if mean_cold else math.nan
    verdict = verdict_of(low, high)
    text = (f"Its I/O cost {ms(diff)} ({interval_text(low, high)}), "
            f"{share:.0%} of the {ms(mean_cold)} {STATE_WORDS[ref]} "
            "start.")
    if verdict == NO_DIFFERENCE:
        text = (f"Its I/O cost cannot be told from noise: {ref} − hot = "
                f"{ms(diff, True)} ({interval_text(low, high)}).")
    return Finding("I/O cost", text,
                   f"{name}: {ref} − hot start-up, {len(cold)} and "
                   f"{len(hot)} ok runs, Welch t interval", verdict,
                   {"reference": ref, "diff_s": diff, "low_s": low,
                    "high_s": high, "share": share, "cold_s": mean_cold})


def state_finding(runs, name, state, what):
    """A start-up state against the real cold start, by total time
    (preparation included)."""
    ref = _reference_state(runs)
    times = ok_times(runs, state)
    if ref is None or not times:
        return None
    cold = ok_times(runs, ref)
    diff, low, high = difference_ci(cold, times)
    mean = sum(times) / len(times)
    mean_cold = sum(cold) / len(cold)
    verdict = verdict_of(low, high)
    if state == "simulated":
        relative = diff / mean_cold if mean_cold else math.nan
        if verdict == NO_DIFFERENCE:
            tail = "the trace holds the start-up's I/O."
        elif verdict == MEASURED:
            tail = ("they differ: the trace misses or adds I/O, or the "
                    "machine was busy.")
        else:
            tail = "too few runs to say whether the trace holds it all."
        text = (f"Simulated cold start ({what}) {ms(mean)} against the real "
                f"{STATE_WORDS[ref]} start {ms(mean_cold)}: {pct(relative)} "
                f"({interval_text(low, high)}); {tail}")
    else:
        if verdict == MEASURED:
            change = f"saves {ms(-diff)}" if diff < 0 else \
                f"costs {ms(diff)} more"
        else:
            change = f"changes it by {ms(diff, True)}"
        text = (f"{what.capitalize()}: {ms(mean)} in total against "
                f"{ms(mean_cold)} {STATE_WORDS[ref]}; {change} "
                f"({interval_text(low, high)}){_recovered_text(runs, mean, mean_cold)}.")
    return Finding(state, text, f"{name}: {state} − {ref} total_s, "
                   f"{len(times)} and {len(cold)} ok runs, Welch t interval",
                   verdict, {"reference": ref, "diff_s": diff, "low_s": low,
                             "high_s": high, "mean_s": mean})


def _recovered_text(runs, mean, mean_cold):
    """The share of the I/O cost (cold − hot) a prefetch state won back, as
    a point estimate: startup-bench's summary gives its interval."""
    hot = ok_times(runs, "hot")
    if not hot:
        return ""
    cost = mean_cold - sum(hot) / len(hot)
    if cost <= 0:
        return ""
    return (f"; recovers {(mean_cold - mean) / cost:.0%} of the I/O cost "
            "(point estimate; its interval is in startup-bench's summary)")


def _replay_variant(run):
    return (run.get("mode", "direct"), run.get("queue_depth", 1),
            run.get("max_request_bytes"))


def replay_finding(runs, topic, key, before, after, what):
    """Replay runs that differ only in `key` (order or grouping): the gain
    of `after` over `before`."""
    groups = {}
    for run in runs:
        if key == "order" and not run.get("grouped", True):
            continue
        if key == "grouped" and run.get("order") != "original":
            continue
        value = run.get(key, True if key == "grouped" else None)
        groups.setdefault(_replay_variant(run), {}).setdefault(
            value, []).append(run)
    for variant, by_value in groups.items():
        if before in by_value and after in by_value:
            a = [r["elapsed_s"] for r in by_value[before]]
            b = [r["elapsed_s"] for r in by_value[after]]
            diff, low, high = difference_ci(a, b)
            mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
            factor = mean_a / mean_b if mean_b else math.nan
            verdict = SINGLE_RUN if len(a) < 2 or len(b) < 2 else \
                verdict_of(low, high)
            files = ", ".join(os.path.basename(r["source"])
                              for r in by_value[before] + by_value[after])
            text = (f"{what}: replay {ms(mean_a)} → {ms(mean_b)}, "
                    f"{factor:.2f}× ({interval_text(low, high)}).")
            return Finding(topic, text, f"replay --json ({variant[0]}): "
                           f"{files}", verdict,
                           {"before_s": mean_a, "after_s": mean_b,
                            "factor": factor, "diff_s": diff, "low_s": low,
                            "high_s": high})
    hint = {"order": "replay --json and replay --sorted --json",
            "grouped": "replay --json and replay --no-group --json"}[key]
    return Finding(topic, f"{what}: not measured (give {hint} runs).",
                   "no matching replay --json runs", NOT_MEASURED)


def model_finding(frame, plan):
    if plan is not None:
        predicted = model.predict_plan(plan)
        where = "physical offsets from the plan"
    else:
        predicted = model.predict_trace(frame)
        where = "file offsets (no plan: every file switch an average seek)"
    original = predicted["original"]["hdd_s"]
    ordered = predicted["sorted"]["hdd_s"]
    if not ordered:
        return Finding("HDD model", "No reads: nothing for order to save.",
                       "seek-cost model", MODELLED, {})
    factor = original / ordered
    return Finding("HDD model", f"On a 7,200 rpm disk, sorting would take the "
                   f"reads from {ms(original)} to {ms(ordered)} "
                   f"({factor:.2f}×).",
                   f"seek-cost model with its defaults (docs/analysis.md), "
                   f"{where}", MODELLED,
                   {"original_s": original, "sorted_s": ordered})


def waste_finding(frame):
    """Pages read but never used, once the trace has access records."""
    if not waste.has_access_records(frame):
        return Finding("waste", "What the start read but never used is not "
                       "known: the trace has no access records.",
                       "record with trace --used (format version 2)",
                       NOT_MEASURED)
    summary = waste.waste_summary(frame)
    page_size = metrics.page_size_of(frame)
    read, unused = summary["read_pages"], summary["unused_pages"]
    mapped = summary["mapped_pages"]
    share = unused / read if read else math.nan
    files = sorted(summary.get("files", []),
                   key=lambda f: -f.get("unused_pages", 0))[:3]
    names = plots._short_names([f["path"] for f in files])
    top = ", ".join(f"{names[f['path']]} "
                    f"{_mib(f['unused_pages'] * page_size)}"
                    for f in files if f.get("unused_pages"))
    return Finding("waste", f"Of the {_mib(read * page_size)} read, "
                   f"{_mib(unused * page_size)} ({share:.0%}) was never "
                   f"accessed" + (f", most in {top}" if top else "")
                   + f"; fault-around mapped {_mib(mapped * page_size)} of "
                   "it (perhaps used without an event).",
                   "trace access and map records (trace --used), "
                   "pagetrace waste", MEASURED,
                   {"read_pages": read, "unused_pages": unused,
                    "mapped_pages": mapped, "share": share})


def findings(frame, name, plan=None, replays=(), runs=None,
             runs_name="runs.csv"):
    """The report's first screen, as a list of Findings."""
    out = [read_finding(frame, name)]
    if runs is not None:
        out.append(io_cost_finding(runs, runs_name))
    out.append(replay_finding(replays, "sorting", "order", "original",
                              "sorted", "Sorting the reads on disk"))
    out.append(replay_finding(replays, "grouping", "grouped", False, True,
                              "Grouping adjacent pages into requests"))
    if runs is not None:
        for state, what in (("prefetched", "prefetching in disk order, then "
                             "starting"),
                            ("prefetched-used", "prefetching only the used "
                             "pages in disk order, then starting"),
                            ("concurrent", "prefetching the used pages in "
                             "first-access order beside the start"),
                            ("simulated", "O_DIRECT replay, then a hot "
                             "start")):
            found = state_finding(runs, runs_name, state, what)
            if found:
                out.append(found)
    out.append(model_finding(frame, plan))
    out.append(waste_finding(frame))
    return out


def findings_markdown(found):
    return "".join(f"- **{f.topic}**: {f.text} *{f.verdict}; "
                   f"source: {f.source}*\n" for f in found)


def findings_html(found):
    items = "".join(
        f"<li><b>{html.escape(f.topic)}</b>: {html.escape(f.text)} "
        f"<span class=\"verdict v-{_verdict_class(f.verdict)}\">"
        f"{html.escape(f.verdict)}</span> "
        f"<span class=\"source\">source: {html.escape(f.source)}</span></li>"
        for f in found)
    return f"<ul class=\"findings\">{items}</ul>"


def _verdict_class(verdict):
    return {MEASURED: "measured", MODELLED: "model"}.get(verdict, "weak")


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
    page.table("Seeks and modelled time", *seek_rows(frame, plan))
    totals = metrics.totals(metrics.read_records(frame))
    page.table("Totals", ["pages", "bytes", "files", "duration (ms)"],
               [[totals["pages"], totals["bytes"], totals["files"],
                 totals["duration_us"] / 1e3]])
    header, rows = per_file_rows(frame)
    page.table("Files (most pages first, top 30)",
               *per_file_rows(frame, limit=30),
               note=f"All {len(rows):,} files: files.csv.")
    written = [write_csv_table(os.path.join(out_dir, "files.csv"),
                               header, rows)]
    if replays:
        page.table("Appendix: cost model fitted to the replay runs",
                   *fit_rows(replays),
                   note="With no more runs than parameters the fit is exact "
                   "and says nothing about the model (determined: no).")
    return page.write(out_dir) + written

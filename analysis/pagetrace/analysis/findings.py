"""The findings, the report's first screen: what the start read, what its
I/O cost, what order or prefetching would save, each with its interval, its
verdict and its source; in Markdown and HTML."""
import html
import math
import os
from dataclasses import dataclass, field

from pagetrace.analysis import metrics, model, plots, waste
from pagetrace.core import stats

MIB = 1 << 20


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

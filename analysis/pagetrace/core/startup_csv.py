"""The start-up runs CSV (docs/data-formats.md, "startup-bench runs"): its
columns, its states, writing and reading it, and the per-state figures.

Standard library only: the start-up bench (pagetrace.tools.startup_bench) writes and
summarises it under sudo with the system Python, and the analysis package
(formats.read_startup_runs, startup.startup_table) reads it with pandas
from the same definitions, so there is one schema and one computation of
the per-state statistics.
"""
import csv
import math
from collections import namedtuple

from pagetrace.core import stats

# Cache states, coldest first: the order runs are made and shown in.
STATES = ("cold", "selective", "hot", "prefetched", "prefetched-used",
          "concurrent", "prefetched-merged", "concurrent-merged", "launched",
          "launched-stale", "simulated")
# `pagetrace launch --pack` starts the command: the prefetch is timed in
# the start (total_s is elapsed_s). launched-stale: the same pack with
# every file's inode changed, as after an upgrade replaced every file.
LAUNCH_STATES = ("launched", "launched-stale")
# The states that prefetch only the pages a start-up used: they need a
# trace with access records (trace --used). The merged ones prefetch the
# merged list (several used traces, varying regions filled, preloads).
USED_STATES = ("prefetched-used", "concurrent", "prefetched-merged",
               "concurrent-merged")
MERGED_STATES = ("prefetched-merged", "concurrent-merged")
# The prefetch runs beside the command: total_s is elapsed_s.
BESIDE_STATES = ("concurrent", "concurrent-merged")
# The states that prefetch, each against the selectively cold start.
PREFETCH_STATES = ("prefetched", "prefetched-used", "concurrent",
                   "prefetched-merged", "concurrent-merged", "launched",
                   "launched-stale")
CSV_COLUMNS = ("run", "state", "iteration", "status", "elapsed_s",
               "prefetch_s", "total_s", "cold_fraction", "throttle")
# Files written before --throttle have no throttle column; read alike.
CSV_COLUMNS_V1 = CSV_COLUMNS[:-1]
STATUSES = ("ok", "failed", "timeout")
# Digits after the point of each number column as written.
_DIGITS = {"elapsed_s": 6, "prefetch_s": 6, "total_s": 6,
           "cold_fraction": 4}

# throttle: the --device-profile name, `riops=N rbps=B` for --throttle, or
# None (the machine's own storage).
Run = namedtuple("Run", CSV_COLUMNS, defaults=(None,))


class StartupCsvError(ValueError):
    """A file that is not a start-up runs CSV: `PATH[:LINE]: why`."""


def _number(value, digits):
    return "" if value is None else f"{value:.{digits}f}"


def run_row(run):
    """One run as a CSV line (without the newline)."""
    return ",".join((str(run.run), run.state, str(run.iteration), run.status,
                     *(_number(getattr(run, c), d) for c, d in
                       _DIGITS.items()), run.throttle or ""))


def header_row():
    return ",".join(CSV_COLUMNS)


def read_runs(path):
    """The runs of a CSV written by the bench. Raises StartupCsvError, or
    OSError when the file cannot be read."""
    def number(text):
        return float(text) if text != "" else None

    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = tuple(next(reader, None) or ())
        if header not in (CSV_COLUMNS, CSV_COLUMNS_V1):
            raise StartupCsvError(f"{path}: not a startup-bench runs CSV "
                                  f"(header must be {header_row()})")
        runs = []
        for line, row in enumerate(reader, 2):
            if len(row) != len(header) or row[1] not in STATES:
                raise StartupCsvError(f"{path}:{line}: malformed run row")
            try:
                runs.append(Run(int(row[0]), row[1], int(row[2]), row[3],
                                *(number(v) for v in row[4:8]),
                                row[8] if len(row) > 8 and row[8] else None))
            except ValueError as exc:
                raise StartupCsvError(f"{path}:{line}: malformed number: "
                                      f"{exc}") from None
        return runs


def mean_ci_figures(values, confidence=0.95):
    """(mean, low, high, half-width in % of the mean) of `values`; NaN
    where unknown (no values; the interval with fewer than two)."""
    if not values:
        return math.nan, math.nan, math.nan, math.nan
    mean, low, high = stats.mean_ci(values, confidence)
    half = 100.0 * (high - mean) / mean if mean and not math.isnan(high) \
        else math.nan
    return mean, low, high, half


def _none_if_nan(value):
    return None if value is None or math.isnan(value) else value


def _mean_of(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(runs, states=STATES):
    """{state: figures} over the ok runs; times are total_s (elapsed_s plus
    the preparatory replay, if any; for concurrent, whose prefetch runs
    beside the command, elapsed_s itself), which is what the user would
    wait."""
    summary = {}
    for state in states:
        mine = [r for r in runs if r.state == state]
        if not mine:
            continue
        ok = [r for r in mine if r.status == "ok"]
        totals = [r.total_s for r in ok if r.total_s is not None]
        mean, low, high, half = mean_ci_figures(totals)
        summary[state] = {
            "runs": len(mine), "ok": len(ok),
            "failed": sum(r.status == "failed" for r in mine),
            "timeout": sum(r.status == "timeout" for r in mine),
            "mean_s": _none_if_nan(mean),
            "median_s": stats.median(totals) if totals else None,
            "ci95_low_s": _none_if_nan(low),
            "ci95_high_s": _none_if_nan(high),
            "ci95_half_percent": _none_if_nan(half),
            "elapsed_mean_s": _mean_of(r.elapsed_s for r in ok),
            "prefetch_mean_s": _mean_of(r.prefetch_s for r in ok),
            "cold_fraction_mean": _mean_of(r.cold_fraction for r in mine)}
    return summary


def _change_percent(value, reference):
    if value is None or not reference:
        return None
    return 100.0 * (value - reference) / reference


def comparisons(summary):
    """The derived figures: simulated vs real cold, prefetch gain, I/O cost."""
    mean = {state: figures["mean_s"] for state, figures in summary.items()}
    result = {
        # 2011: "simulated cold + warm" should be close to a real cold start.
        # The like-for-like real cold start is selective (same files evicted).
        "simulated_vs_selective_percent": _change_percent(mean.get("simulated"),
                                                          mean.get("selective")),
        "simulated_vs_cold_percent": _change_percent(mean.get("simulated"),
                                                     mean.get("cold")),
        # Negative: the prefetched start (prefetch included) is faster.
        "prefetched_vs_selective_percent": _change_percent(
            mean.get("prefetched"), mean.get("selective")),
        "prefetched_used_vs_selective_percent": _change_percent(
            mean.get("prefetched-used"), mean.get("selective")),
        "concurrent_vs_selective_percent": _change_percent(
            mean.get("concurrent"), mean.get("selective")),
        "selective_minus_hot_s": None,
    }
    if mean.get("selective") is not None and mean.get("hot") is not None:
        result["selective_minus_hot_s"] = mean["selective"] - mean["hot"]
    return result


# ---------------------------------------------------------------------------
# What a prefetch gains, with intervals. The states run interleaved, one of
# each per iteration, so the runs of one iteration share the machine's
# drift: the figures pair them by iteration.

def ratio_ci(numerators, denominators, confidence=0.95):
    """(ratio, low, high) of mean(numerators) / mean(denominators), paired
    values, with Fieller's interval (E. C. Fieller, "Some problems in
    interval estimation", 1954): the ratios r for which the mean of
    n - r * d is not significantly different from 0 by Student's t.
    low and high are None when the interval is not bounded (the
    denominator's mean is not significantly different from 0) or there
    are fewer than two pairs; ratio is None when mean(denominators) is 0."""
    n = len(numerators)
    if n == 0:
        return None, None, None
    a = sum(numerators) / n
    b = sum(denominators) / n
    ratio = a / b if b else None
    if n < 2:
        return ratio, None, None
    t2 = stats.t_quantile(0.5 + confidence / 2.0, n - 1) ** 2

    def covariance(xs, mx, ys, my):
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (n - 1) / n

    vaa = covariance(numerators, a, numerators, a)
    vbb = covariance(denominators, b, denominators, b)
    vab = covariance(numerators, a, denominators, b)
    # (a - r b)^2 = t^2 (vaa - 2 r vab + r^2 vbb), solved for r.
    qa = b * b - t2 * vbb
    qb = a * b - t2 * vab
    qc = a * a - t2 * vaa
    if qa <= 0:
        return ratio, None, None
    # With qa > 0 the quadratic is <= 0 at r = a / b, so it has real roots:
    # a negative discriminant is rounding (proportional pairs), i.e. 0.
    root = math.sqrt(max(0.0, qb * qb - qa * qc))
    return ratio, (qb - root) / qa, (qb + root) / qa


def paired_totals(runs, states):
    """[{state: total_s}] for the iterations in which every one of `states`
    has exactly one ok run with a time, in iteration order."""
    by_iteration = {}
    for r in runs:
        if r.state in states:
            by_iteration.setdefault(r.iteration, []).append(r)
    paired = []
    for iteration in sorted(by_iteration):
        mine = by_iteration[iteration]
        ok = {r.state: r.total_s for r in mine
              if r.status == "ok" and r.total_s is not None}
        if len(mine) == len(states) and len(ok) == len(states):
            paired.append(ok)
    return paired


def _percent_or_none(value):
    return None if value is None else 100.0 * value


def prefetch_gains(runs, confidence=0.95):
    """{state: figures} for each prefetch state run with selective: its
    total against the selectively cold start, in percent, over the
    iterations where both ran ok; and, where hot ran too, the share of the
    I/O cost (selective - hot) it recovers, (selective - state) /
    (selective - hot), over the iterations where all three ran ok. Each
    with Fieller's interval (ratio_ci)."""
    gains = {}
    for state in PREFETCH_STATES:
        pairs = paired_totals(runs, ("selective", state))
        if not pairs:
            continue
        change, change_low, change_high = ratio_ci(
            [p[state] - p["selective"] for p in pairs],
            [p["selective"] for p in pairs], confidence)
        triples = paired_totals(runs, ("selective", "hot", state))
        recovered, low, high = ratio_ci(
            [p["selective"] - p[state] for p in triples],
            [p["selective"] - p["hot"] for p in triples], confidence)
        # No bounded interval over paired iterations: by Fieller's rule the
        # I/O cost is not different from 0, and a share of it means nothing.
        io_cost_in_noise = len(triples) >= 2 and recovered is not None and low is None
        if io_cost_in_noise:
            recovered = None
        gains[state] = {
            "iterations": len(pairs),
            "vs_selective_percent": _percent_or_none(change),
            "vs_selective_ci95_low_percent": _percent_or_none(change_low),
            "vs_selective_ci95_high_percent": _percent_or_none(change_high),
            "recovered_iterations": len(triples),
            "recovered_fraction": recovered,
            "recovered_ci95_low": low,
            "recovered_ci95_high": high,
            "io_cost_in_noise": io_cost_in_noise}
    return gains


def best_prefetch_state(gains):
    """The prefetch state that recovers the most of the I/O cost, or None."""
    known = [(g["recovered_fraction"], state) for state, g in gains.items()
             if g["recovered_fraction"] is not None]
    return max(known)[1] if known else None

"""The start-up runs CSV (docs/data-formats.md, "startup-bench runs"): its
columns, its states, writing and reading it, and the per-state figures.

Standard library only: the start-up bench (pagetrace.bench) writes and
summarises it under sudo with the system Python, and the analysis package
(formats.read_startup_runs, startup.startup_table) reads it with pandas
from the same definitions, so there is one schema and one computation of
the per-state statistics.
"""
import csv
import math
from collections import namedtuple

from . import stats

# Cache states, coldest first: the order runs are made and shown in.
STATES = ("cold", "selective", "hot", "prefetched", "simulated")
CSV_COLUMNS = ("run", "state", "iteration", "status", "elapsed_s",
               "prefetch_s", "total_s", "cold_fraction")
STATUSES = ("ok", "failed", "timeout")
# Digits after the point of each number column as written.
_DIGITS = {"elapsed_s": 6, "prefetch_s": 6, "total_s": 6,
           "cold_fraction": 4}

Run = namedtuple("Run", CSV_COLUMNS)


class StartupCsvError(ValueError):
    """A file that is not a start-up runs CSV: `PATH[:LINE]: why`."""


def _number(value, digits):
    return "" if value is None else f"{value:.{digits}f}"


def run_row(run):
    """One run as a CSV line (without the newline)."""
    return ",".join((str(run.run), run.state, str(run.iteration), run.status,
                     *(_number(getattr(run, c), d) for c, d in
                       _DIGITS.items())))


def header_row():
    return ",".join(CSV_COLUMNS)


def read_runs(path):
    """The runs of a CSV written by the bench. Raises StartupCsvError, or
    OSError when the file cannot be read."""
    def number(text):
        return float(text) if text != "" else None

    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if tuple(header or ()) != CSV_COLUMNS:
            raise StartupCsvError(f"{path}: not a startup-bench runs CSV "
                                  f"(header must be {header_row()})")
        runs = []
        for line, row in enumerate(reader, 2):
            if len(row) != len(CSV_COLUMNS) or row[1] not in STATES:
                raise StartupCsvError(f"{path}:{line}: malformed run row")
            try:
                runs.append(Run(int(row[0]), row[1], int(row[2]), row[3],
                                *(number(v) for v in row[4:])))
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
    the preparatory replay, if any), which is what the user would wait."""
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
        "selective_minus_hot_s": None,
    }
    if mean.get("selective") is not None and mean.get("hot") is not None:
        result["selective_minus_hot_s"] = mean["selective"] - mean["hot"]
    return result

"""startup-bench: the runs CSV (docs/data-formats.md) and the summary of
the session, in words."""

from pagetrace.core.startup_csv import (StartupCsvError, header_row, read_runs,
                                        run_row)
from pagetrace.tools.startup_bench.supervise import BenchError


# ---------------------------------------------------------------------------
# Raw runs (CSV) and their summary.

class RunWriter:
    """Writes each run as it ends, so an interrupted session keeps its runs."""

    def __init__(self, path):
        try:
            self.file = open(path, "w", newline="") if path else None
        except OSError as exc:
            raise BenchError(f"{path}: {exc.strerror}") from None
        if self.file:
            self.file.write(header_row() + "\n")
            self.file.flush()

    def write(self, run):
        if not self.file:
            return
        self.file.write(run_row(run) + "\n")
        self.file.flush()

    def close(self):
        if self.file:
            self.file.close()


def read_runs_csv(path):
    """The runs of a CSV written by startup-bench (for --summarize)."""
    try:
        return read_runs(path)
    except StartupCsvError as exc:
        raise BenchError(str(exc)) from None
    except OSError as exc:
        raise BenchError(f"{path}: {exc.strerror}") from None


def _fmt(value, digits=3, suffix=""):
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def print_summary(summary, compared, notes, out):
    head = ("state", "ok/runs", "mean_s", "median_s", "95% CI (s)", "±%",
            "elapsed_s", "prefetch_s", "cold_frac")
    rows = [head]
    for state, f in summary.items():
        ci = ("-" if f["ci95_low_s"] is None
              else f"{f['ci95_low_s']:.3f}-{f['ci95_high_s']:.3f}")
        rows.append((state, f"{f['ok']}/{f['runs']}", _fmt(f["mean_s"]),
                     _fmt(f["median_s"]), ci, _fmt(f["ci95_half_percent"], 1),
                     _fmt(f["elapsed_mean_s"]), _fmt(f["prefetch_mean_s"]),
                     _fmt(f["cold_fraction_mean"], 3)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))), file=out)
    labels = (("simulated_vs_selective_percent", "simulated vs real cold (selective)"),
              ("simulated_vs_cold_percent", "simulated vs real cold (drop_caches)"))
    for key, label in labels:
        if compared.get(key) is not None:
            print(f"{label}: {compared[key]:+.1f}%", file=out)
    if compared.get("selective_minus_hot_s") is not None:
        print(f"I/O cost (selective - hot): {compared['selective_minus_hot_s']:.3f} s",
              file=out)
    if any(in_noise(g) for g in compared.get("prefetch_gains", {}).values()):
        print(NOISE_WARNING, file=out)
    for state, gain in compared.get("prefetch_gains", {}).items():
        print(gain_text(state, gain), file=out)
    best = compared.get("best_prefetch_state")
    if best and not in_noise(compared["prefetch_gains"][best]):
        print(f"best prefetch state: {best}, recovers "
              f"{_percent_text(compared['prefetch_gains'][best]['recovered_fraction'])} "
              "of the I/O cost", file=out)
    for note in notes:
        print(note, file=out)


NOISE_WARNING = (
    "WARNING: the I/O cost is within the noise of a hot start (selective is "
    "not significantly slower than hot): its cold states were not cold, or "
    "the trace holds too little of the start; no recovery figure. Trace a "
    "cold start (sudo pagetrace trace --drop-caches --used -x -o reads.log "
    "-- CMD) and give it as --trace")


def in_noise(gain):
    """The I/O cost is within the noise of a hot start (prefetch_gains())."""
    return gain["io_cost_in_noise"]


def _percent_text(fraction):
    return "-" if fraction is None else f"{100 * fraction:.0f}%"


def _interval_text(low, high, form):
    """`95% CI LOW to HIGH%` with `form` (e.g. "+.1f"), or why there is none."""
    if low is None or high is None:
        return "95% CI not bounded"
    return f"95% CI {low:{form}} to {high:{form}}%"


def gain_text(state, gain):
    """`prefetched-used (total) vs selective: -20.1% (95% CI -25.0 to
    -15.2%); recovers 67% of the I/O cost (95% CI 50 to 84%), 10 paired
    iteration(s)`"""
    change = gain["vs_selective_percent"]
    text = f"{state} (total) vs selective: " + (
        "-" if change is None else
        f"{change:+.1f}% (" + _interval_text(gain["vs_selective_ci95_low_percent"],
                                             gain["vs_selective_ci95_high_percent"],
                                             "+.1f") + ")")
    if in_noise(gain):
        text += "; no recovery figure: the I/O cost is within the noise"
    elif gain["recovered_iterations"]:
        low, high = gain["recovered_ci95_low"], gain["recovered_ci95_high"]
        text += (f"; recovers {_percent_text(gain['recovered_fraction'])} of the "
                 "I/O cost (" + _interval_text(None if low is None else 100 * low,
                                               None if high is None else 100 * high,
                                               ".0f") + ")")
    return text + f", {gain['iterations']} paired iteration(s)"

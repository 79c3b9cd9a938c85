"""`pagetrace compare A B`: did the change help? Two runs of one start-up
(say read_ahead_kb 128 against 8192, or before and after a prefetch list)
in one report: findings first, both runs' figures on shared axes, the
start-up states side by side with the difference and its 95% interval,
and the files added, removed, grown or shrunk.

Run A is the baseline; every difference is B − A."""
import math
import os

import pandas as pd

from pagetrace.analysis import metrics, plots, startup_table as startup, waste
from pagetrace.core.escape import escape
from pagetrace.analysis.formats import read_replay_json, read_startup_runs
from pagetrace.analysis.findings import (MEASURED, NOT_MEASURED, SINGLE_RUN,
                                         STATE_WORDS, Finding, _mib,
                                         difference_ci, interval_text,
                                         io_cost_finding, ms, ok_times, pct,
                                         verdict_of, waste_finding)
from pagetrace.analysis.report import Page, trace_subtitle, write_csv_table
from pagetrace.analysis.trace_frame import read_trace

# Rows of the file table in the report (all of them go to the CSV).
FILE_ROWS = 40


def labels_for(path_a, path_b, labels=None):
    """Names of the two runs: given, or the traces' file names (prefixed
    A: and B: when they are the same)."""
    if labels and all(labels):
        return tuple(labels)
    a, b = os.path.basename(str(path_a)), os.path.basename(str(path_b))
    return (f"A: {a}", f"B: {b}") if a == b else (a, b)


def file_changes(frame_a, frame_b):
    """Per file read by either run: bytes read by A and by B, their first
    reads (ms since each run's first read; NaN where the run did not read
    the file), the change in bytes (B − A) and what happened: `added`,
    `removed`, `grew`, `shrank` or `same`. Largest change first, then by
    path."""
    tables = []
    for frame in (frame_a, frame_b):
        table = metrics.per_file(frame)
        t0 = plots.first_read_us(frame) or 0
        tables.append(pd.DataFrame({
            "bytes": table["bytes"].astype("int64"),
            "first_ms": (table["first_us"] - t0) / 1e3}))
    a, b = tables
    joined = a.join(b, how="outer", lsuffix="_a", rsuffix="_b")
    for column in ("bytes_a", "bytes_b"):
        joined[column] = joined[column].fillna(0).astype("int64")
    joined["change"] = joined["bytes_b"] - joined["bytes_a"]
    joined["what"] = "same"
    joined.loc[joined["change"] > 0, "what"] = "grew"
    joined.loc[joined["change"] < 0, "what"] = "shrank"
    joined.loc[joined["first_ms_a"].isna(), "what"] = "added"
    joined.loc[joined["first_ms_b"].isna(), "what"] = "removed"
    joined.index.name = "path"
    joined = joined.reset_index()
    joined["order"] = -joined["change"].abs()
    joined = joined.sort_values(["order", "path"], kind="stable")
    return joined.drop(columns="order").reset_index(drop=True)


def file_change_rows(changes, limit=None):
    header = ["path", "A (MiB)", "B (MiB)", "B − A (MiB)", "A first (ms)",
              "B first (ms)", "change"]
    shown = changes if limit is None else \
        changes[changes["what"] != "same"].head(limit)
    rows = [[escape(r.path), r.bytes_a / plots.MIB, r.bytes_b / plots.MIB,
             r.change / plots.MIB, float(r.first_ms_a), float(r.first_ms_b),
             r.what] for r in shown.itertuples()]
    return header, rows


def startup_compare_rows(runs_a, runs_b, labels):
    """Per state in both: A and B (mean ± CI), B − A with its 95% interval,
    the change in percent, the verdict."""
    header = ["state", f"{labels[0]}", f"{labels[1]}", "B − A",
              "95% CI of B − A", "change", "verdict"]
    table_a = startup.startup_table(runs_a)
    table_b = startup.startup_table(runs_b)
    rows, results = [], {}
    for state in [s for s in table_a.index if s in table_b.index]:
        a, b = ok_times(runs_a, state), ok_times(runs_b, state)
        diff, low, high = difference_ci(a, b)
        mean_a = sum(a) / len(a) if a else math.nan
        verdict = verdict_of(low, high)
        results[state] = {"a_s": mean_a, "diff_s": diff, "low_s": low,
                          "high_s": high, "verdict": verdict,
                          "runs": (len(a), len(b))}
        rows.append([state,
                     startup.format_mean_ci(table_a.loc[state, "total_s_mean"],
                                            table_a.loc[state,
                                                        "total_s_pm_pct"]),
                     startup.format_mean_ci(table_b.loc[state, "total_s_mean"],
                                            table_b.loc[state,
                                                        "total_s_pm_pct"]),
                     ms(diff, True) if not math.isnan(diff) else "n/a",
                     interval_text(low, high, prefix=""),
                     pct(diff / mean_a) if mean_a else "n/a",
                     verdict])
    return header, rows, results


def _trace_summary(frame):
    reads = metrics.read_records(frame)
    span = (int(reads["ts_us"].max()) - int(reads["ts_us"].min())) / 1e3 \
        if len(reads) else 0.0
    return {"bytes": len(reads) * metrics.page_size_of(frame),
            "files": int(reads["path"].nunique()), "span_ms": span}


def read_compare_finding(frame_a, frame_b, labels, names):
    a, b = _trace_summary(frame_a), _trace_summary(frame_b)
    change = b["bytes"] - a["bytes"]
    relative = f" ({pct(change / a['bytes'])})" if a["bytes"] else ""
    sign = "+" if change >= 0 else "−"
    text = (f"{labels[0]} read {_mib(a['bytes'])} from {a['files']:,} files "
            f"over {ms(a['span_ms'] / 1e3)}; {labels[1]} read "
            f"{_mib(b['bytes'])} from {b['files']:,} files over "
            f"{ms(b['span_ms'] / 1e3)}: {sign}{_mib(abs(change))}"
            f"{relative}.")
    return Finding("read", text, f"traces {names[0]} and {names[1]} (one "
                   "trace each: their run-to-run variation is not known)",
                   MEASURED, {"a": a, "b": b, "change_bytes": change})


def files_compare_finding(changes, names):
    counts = changes["what"].value_counts()
    parts = []
    for what in ("added", "removed", "grew", "shrank"):
        mine = changes[changes["what"] == what]
        if len(mine):
            parts.append(f"{len(mine):,} {what} "
                         f"({'+' if mine['change'].sum() >= 0 else '−'}"
                         f"{_mib(abs(int(mine['change'].sum())))})")
    text = ("Files: " + ", ".join(parts) + f"; {int(counts.get('same', 0)):,}"
            " read the same." if parts else
            "Files: both runs read the same bytes of the same files.")
    return Finding("files", text, f"per-file bytes read, {names[0]} against "
                   f"{names[1]} (table below, all in files-changed.csv)",
                   MEASURED, {k: int(v) for k, v in counts.items()})


def startup_compare_findings(results, labels, name):
    found = []
    for state, r in results.items():
        if math.isnan(r["diff_s"]):
            continue
        mean_b = r["a_s"] + r["diff_s"]
        if r["verdict"] == MEASURED:
            said = "faster" if r["diff_s"] < 0 else "slower"
            verdict_text = f"{labels[1]} is {ms(abs(r['diff_s']))} {said}"
        else:
            verdict_text = f"{ms(r['diff_s'], True)}"
        text = (f"{STATE_WORDS.get(state, state).capitalize()} start: "
                f"{ms(r['a_s'])} → "
                f"{ms(mean_b)}; {verdict_text} ({interval_text(r['low_s'], r['high_s'])},"
                f" {pct(r['diff_s'] / r['a_s'])}).")
        found.append(Finding(
            state, text, f"{name}: total_s of the ok runs, {r['runs'][0]} "
            f"and {r['runs'][1]}, Welch t interval", r["verdict"], r))
    return found


def replay_compare_findings(replays_a, replays_b, labels):
    found = []
    for order in ("original", "sorted", "file"):
        a = [r["elapsed_s"] for r in replays_a if r.get("order") == order]
        b = [r["elapsed_s"] for r in replays_b if r.get("order") == order]
        if not a or not b:
            continue
        diff, low, high = difference_ci(a, b)
        mean_a = sum(a) / len(a)
        verdict = SINGLE_RUN if len(a) < 2 or len(b) < 2 else \
            verdict_of(low, high)
        found.append(Finding(
            f"replay, {order}", f"Replay in {order} order: {ms(mean_a)} → "
            f"{ms(mean_a + diff)} ({pct(diff / mean_a)}, "
            f"{interval_text(low, high)}).",
            f"replay --json: {len(a)} run(s) of {labels[0]}, {len(b)} of "
            f"{labels[1]}", verdict, {"a_s": mean_a, "diff_s": diff}))
    return found


def build_compare(trace_a, trace_b, out_dir, startup_a=None, startup_b=None,
                  replays_a=(), replays_b=(), labels=None):
    """Write the comparison of run A (baseline) and run B to `out_dir`:
    index.html (self-contained), report.md, files-changed.csv and the
    figures as PNG and SVG. Returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    frame_a, frame_b = read_trace(trace_a), read_trace(trace_b)
    labels = labels_for(trace_a, trace_b, labels)
    names = (os.path.basename(str(trace_a)), os.path.basename(str(trace_b)))
    runs = [read_startup_runs(p) if p else None for p in (startup_a,
                                                          startup_b)]
    replays = [[read_replay_json(p) for p in paths]
               for paths in (replays_a, replays_b)]
    changes = file_changes(frame_a, frame_b)
    page = Page(f"pagetrace compare: {labels[0]} against {labels[1]}",
                f"A: {trace_subtitle(frame_a)}. B: {trace_subtitle(frame_b)}."
                " Differences are B − A.")
    found = [read_compare_finding(frame_a, frame_b, labels, names),
             files_compare_finding(changes, names)]
    startup_table = None
    if runs[0] is not None and runs[1] is not None:
        run_names = " and ".join(os.path.basename(str(p))
                                 for p in (startup_a, startup_b))
        header, rows, results = startup_compare_rows(runs[0], runs[1],
                                                     labels)
        startup_table = (header, rows)
        found += startup_compare_findings(results, labels, run_names)
        for label, run, path in zip(labels, runs, (startup_a, startup_b)):
            cost = io_cost_finding(run, os.path.basename(str(path)))
            cost.topic = f"I/O cost, {label}"
            found.append(cost)
    else:
        found.append(Finding("start-up", "Start-up times not compared: give "
                             "--startup-a and --startup-b (startup-bench "
                             "--csv of each run).", "no runs CSV for "
                             + " and ".join(label for label, run in
                                            zip(labels, runs) if run is None),
                             NOT_MEASURED))
    found += replay_compare_findings(replays[0], replays[1], labels)
    if any(waste.has_access_records(f) for f in (frame_a, frame_b)):
        for label, frame in zip(labels, (frame_a, frame_b)):
            wasted = waste_finding(frame)
            wasted.topic = f"waste, {label}"
            found.append(wasted)
    page.findings(found)
    page.figure(out_dir, "Which files, when (same rows, same time axis)",
                "waterfall", plots.plot_waterfall_pair((frame_a, frame_b),
                                                       labels))
    if startup_table is not None:
        page.figure(out_dir, "Start-up time per cache state", "startup",
                    plots.plot_startup_pair(
                        [startup.startup_table(r) for r in runs], labels))
    page.figure(out_dir, "Reads over time (shared axes)", "offset-time",
                plots.plot_offset_time_pair((frame_a, frame_b), labels))
    if startup_table is not None:
        page.table("Start-up time per cache state (total, mean ± 95% CI)",
                   *startup_table)
    header, rows = file_change_rows(changes)
    page.table(f"Files added, removed, grown or shrunk (largest change "
               f"first, top {FILE_ROWS})",
               *file_change_rows(changes, FILE_ROWS),
               note=f"All {len(rows):,} files: files-changed.csv.")
    written = [write_csv_table(os.path.join(out_dir, "files-changed.csv"),
                               header, rows)]
    return page.write(out_dir) + written

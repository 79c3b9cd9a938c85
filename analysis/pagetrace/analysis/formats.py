"""Readers of the files the other tools write (docs/data-formats.md):
the `replay --plan` CSV, the `replay --json` object and the startup-bench
runs CSV."""
import json

import numpy as np
import pandas as pd

from pagetrace.core import startup_csv
from pagetrace.core.escape import unescape

PLAN_COLUMNS = ("order", "path", "offset", "length", "dev", "physical_offset")
# The start-up CSV's schema is the core's (startup_csv, standard library).
STARTUP_COLUMNS = startup_csv.CSV_COLUMNS
STARTUP_STATES = startup_csv.STATES
REPLAY_REQUIRED_KEYS = ("order", "requests", "bytes", "elapsed_s")


class FormatError(ValueError):
    """A file that does not follow docs/data-formats.md."""


def read_plan(path):
    """Read a `replay --plan` CSV into a DataFrame, one row per request.

    `physical_offset` is a nullable Int64 column (empty cells are <NA>).
    Paths are escaped like in traces, but a path may still hold a comma, so
    each row is split at its first comma and its last four.
    """
    source = str(path)
    with open(path, "rb") as plan_file:
        lines = plan_file.read().split(b"\n")
    header = lines[0].decode("ascii", "replace").strip()
    if tuple(header.split(",")) != PLAN_COLUMNS:
        raise FormatError(f"{source}:1: expected header {','.join(PLAN_COLUMNS)}"
                          f", got {header!r}")
    rows = []
    for line_no, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        order, _, rest = raw.partition(b",")
        parts = rest.rsplit(b",", 4)
        if len(parts) != 5:
            raise FormatError(f"{source}:{line_no}: expected 6 fields")
        path_field, offset, length, dev, physical = parts
        try:
            rows.append((int(order), unescape(path_field), int(offset),
                         int(length), dev.decode("ascii"),
                         int(physical) if physical.strip() else None))
        except ValueError as err:
            raise FormatError(f"{source}:{line_no}: {err}") from None
    frame = pd.DataFrame(rows, columns=list(PLAN_COLUMNS))
    frame["path"] = frame["path"].astype("category")
    frame["dev"] = frame["dev"].astype("category")
    for column in ("order", "offset", "length"):
        frame[column] = frame[column].astype(np.int64)
    frame["physical_offset"] = pd.array(
        [None if pd.isna(v) else int(v) for v in frame["physical_offset"]],
        dtype="Int64")
    frame.attrs["source"] = source
    return frame


def read_replay_json(path):
    """Read one `replay --json` object; returns a dict (checked)."""
    source = str(path)
    with open(path, encoding="utf-8") as json_file:
        run = json.load(json_file)
    if run.get("tool") != "replay" or run.get("format") != 1:
        raise FormatError(f"{source}: not a replay --json object of format 1")
    missing = [k for k in REPLAY_REQUIRED_KEYS if k not in run]
    if missing:
        raise FormatError(f"{source}: missing keys {', '.join(missing)}")
    run["source"] = source
    return run


def replay_runs_frame(runs):
    """Several replay --json objects as a DataFrame, one row per run."""
    keys = ("source", "order", "mode", "grouped", "max_request_bytes",
            "queue_depth", "requests", "pages", "bytes", "files",
            "elapsed_s", "mib_per_s", "mean_request_bytes", "seeks",
            "seek_distance_bytes")
    return pd.DataFrame([{k: run.get(k) for k in keys} for run in runs])


def read_startup_runs(path):
    """Read a startup-bench runs CSV into a DataFrame, one row per run."""
    source = str(path)
    frame = pd.read_csv(path, dtype={"state": str, "status": str},
                        keep_default_na=False, na_values=[""])
    if tuple(frame.columns) == startup_csv.CSV_COLUMNS_V1:
        frame["throttle"] = None   # written before --throttle
    if tuple(frame.columns) != STARTUP_COLUMNS:
        raise FormatError(f"{source}:1: expected header "
                          f"{','.join(STARTUP_COLUMNS)}")
    for column in ("run", "iteration"):
        frame[column] = frame[column].astype(np.int64)
    for column in ("elapsed_s", "prefetch_s", "total_s", "cold_fraction"):
        frame[column] = frame[column].astype(float)
    unknown = sorted(set(frame["state"]) - set(STARTUP_STATES))
    if unknown:
        raise FormatError(f"{source}: unknown states {', '.join(unknown)}")
    frame.attrs["source"] = source
    return frame

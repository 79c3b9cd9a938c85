"""Start-up timing tables: mean and 95% confidence interval per cache state,
as the 2011 posts reported them ("2,764.26 ± 0.42%")."""
import math

import pandas as pd

from pagetrace.core import startup_csv
from pagetrace.analysis.formats import STARTUP_STATES


def startup_table(runs, columns=("elapsed_s", "total_s"), confidence=0.95):
    """One row per state present, coldest first.

    Only runs with status `ok` count; `failed` says how many others there
    were. For each of `columns`: mean, CI bounds, and the half-width as a
    percentage of the mean (NaN with fewer than two runs).
    """
    rows = []
    present = [s for s in STARTUP_STATES if s in set(runs["state"])]
    for state in present:
        of_state = runs[runs["state"] == state]
        ok = of_state[of_state["status"] == "ok"]
        row = {"state": state, "runs": int(len(ok)),
               "failed": int(len(of_state) - len(ok))}
        for column in columns:
            # The same figures as the bench's own summary.
            mean, low, high, pm_pct = startup_csv.mean_ci_figures(
                ok[column].dropna().tolist(), confidence)
            row[f"{column}_mean"] = mean
            row[f"{column}_low"] = low
            row[f"{column}_high"] = high
            row[f"{column}_pm_pct"] = pm_pct
        rows.append(row)
    return pd.DataFrame(rows).set_index("state")


def format_mean_ci(mean, pm_pct, unit_scale=1e3, unit="ms"):
    """`2764.26 ms ± 0.42%`, or just the mean when the interval is unknown."""
    if math.isnan(mean):
        return "n/a"
    text = f"{mean * unit_scale:,.2f} {unit}"
    return text if math.isnan(pm_pct) else f"{text} ± {pm_pct:.2f}%"

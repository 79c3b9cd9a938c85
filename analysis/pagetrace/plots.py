"""Figures: offset against time per file (the 2011 posts' graphs), physical
position against modelled time for original and sorted plans, start-up
times with error bars. Every function returns a matplotlib Figure drawn
on an Agg canvas, so it works without a display.

Figures are built with matplotlib's object API rather than pyplot: pyplot
keeps every figure alive until closed and switching its global backend
would fight a notebook's inline one."""
import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from . import metrics, model

# Files beyond this many (by pages read) share one grey colour, so that the
# legend stays readable.
LEGEND_FILES = 10
OTHER_COLOUR = "0.6"
MIB = 1 << 20


def densest_window(ts_ms, fraction=0.1):
    """The time window of `fraction` of the trace's duration that holds the
    most reads: (start_ms, end_ms). Ties go to the earliest window."""
    ts_ms = np.sort(np.asarray(ts_ms, dtype=float))
    if len(ts_ms) == 0:
        return 0.0, 0.0
    width = (ts_ms[-1] - ts_ms[0]) * fraction
    if width == 0:
        return float(ts_ms[0]), float(ts_ms[-1])
    # For each read as a window start, how many reads fall in the window.
    counts = np.searchsorted(ts_ms, ts_ms + width, side="right") - \
        np.arange(len(ts_ms))
    best = int(np.argmax(counts))
    return float(ts_ms[best]), float(ts_ms[best] + width)


def _subplots(figsize, ncols=1, **kwargs):
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, ncols, **kwargs)


def _file_colours(frame):
    """Colour per file: the LEGEND_FILES most read files get their own."""
    pages = frame["path"].value_counts(sort=True)
    top = [p for p in pages.index[:LEGEND_FILES]]
    cycle = matplotlib.colormaps["tab10"].colors
    return {p: cycle[i % len(cycle)] for i, p in enumerate(top)}


def plot_offset_time(frame, zoom=False, zoom_fraction=0.1, title=None):
    """File offset (MiB) against time since the first read (ms), one colour
    per file. With `zoom`, the axes show only the densest time window
    (`densest_window`) and the offsets read in it."""
    ts_ms = (frame["ts_us"].to_numpy() - frame["ts_us"].min()) / 1e3 \
        if len(frame) else np.zeros(0)
    offset_mib = frame["offset"].to_numpy() / MIB
    paths = frame["path"].astype(str).to_numpy()
    colours = _file_colours(frame)
    fig, ax = _subplots((9, 5))
    for path, colour in colours.items():
        mine = paths == path
        ax.scatter(ts_ms[mine], offset_mib[mine], s=4, color=colour,
                   label=path, linewidths=0)
    others = ~np.isin(paths, list(colours))
    if others.any():
        ax.scatter(ts_ms[others], offset_mib[others], s=4, color=OTHER_COLOUR,
                   label=f"{len(set(paths[others]))} other files",
                   linewidths=0)
    ax.set_xlabel("time since first read (ms)")
    ax.set_ylabel("offset in file (MiB)")
    if zoom and len(ts_ms):
        start, end = densest_window(ts_ms, zoom_fraction)
        inside = (ts_ms >= start) & (ts_ms <= end)
        low, high = offset_mib[inside].min(), offset_mib[inside].max()
        margin = max((high - low) * 0.02, 4096 / MIB)
        ax.set_xlim(start, end)
        ax.set_ylim(low - margin, high + margin)
        # The legend names only the files read inside the window.
        for collection in ax.collections:
            x = collection.get_offsets()[:, 0]
            if not ((x >= start) & (x <= end)).any():
                collection.set_label("_hidden")
    ax.set_title(title or ("densest region" if zoom else "reads over time"))
    ax.legend(fontsize="x-small", markerscale=3, loc="best")
    fig.tight_layout()
    return fig


def plot_plan_physical(plan, hdd=None,
                       max_request_bytes=metrics.DEFAULT_MAX_REQUEST_BYTES):
    """Physical position (MiB) against modelled HDD time (ms), for the plan
    as given (left) and in on-disk order (right), same y axis. Each point
    is a request at the time the model says it starts."""
    hdd = hdd or model.HDDModel()
    sorted_plan = metrics.sort_plan_physically(plan, max_request_bytes)
    fig, axes = _subplots((11, 4.5), ncols=2, sharey=True)
    for ax, requests, name in ((axes[0], plan, "original order"),
                               (axes[1], sorted_plan, "sorted on disk")):
        known = requests["physical_offset"].notna().to_numpy(dtype=bool)
        seeks = metrics.physical_seeks(requests)
        seek = seeks["seek"].to_numpy().copy()
        if len(seek):
            seek[0] = True
        times = hdd.request_ms(requests["length"].to_numpy(), seek,
                               seeks["distance"].to_numpy())
        start_ms = np.concatenate(([0.0], np.cumsum(times)[:-1]))
        position = requests["physical_offset"].to_numpy(
            dtype=float, na_value=np.nan) / MIB
        ax.plot(start_ms[known], position[known], marker="o", markersize=3,
                linewidth=0.6)
        ax.set_title(f"{name}: {times.sum():,.1f} ms modelled")
        ax.set_xlabel("modelled HDD time (ms)")
    axes[0].set_ylabel("position on device (MiB)")
    fig.tight_layout()
    return fig


def plot_startup(table, column="total_s"):
    """Mean start-up time per state with its 95% confidence interval."""
    mean = table[f"{column}_mean"].to_numpy() * 1e3
    low = table[f"{column}_low"].to_numpy() * 1e3
    high = table[f"{column}_high"].to_numpy() * 1e3
    # An unknown interval (one run) draws no error bar rather than a wrong one.
    error = np.vstack((np.nan_to_num(mean - low), np.nan_to_num(high - mean)))
    fig, ax = _subplots((7, 4))
    ax.bar(list(table.index), mean, yerr=error, capsize=6, color="tab:blue")
    ax.set_ylabel(f"{column.removesuffix('_s')} time (ms), mean ± 95% CI")
    ax.set_title("start-up time per cache state")
    fig.tight_layout()
    return fig


def save_figure(fig, stem):
    """Write `stem`.png and `stem`.svg; returns both paths."""
    paths = [f"{stem}.png", f"{stem}.svg"]
    fig.savefig(paths[0], dpi=110)
    fig.savefig(paths[1])
    return paths

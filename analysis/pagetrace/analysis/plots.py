"""Figures: offset against time per file (the 2011 posts' graphs), a file
waterfall (one bar per file from its first to its last read, as a
browser's network panel draws requests), physical position against
modelled time for original and sorted plans, start-up times with error
bars, pages used against pages read, and the side-by-side versions of these
that `pagetrace compare` draws on shared axes. Every function returns a
matplotlib Figure drawn on an Agg canvas, so it works without a display.

"Read" means `read` records only: a version 2 trace (`trace --used`) also
holds `access` and `map` records, which are not reads from storage.

Figures are built with matplotlib's object API rather than pyplot: pyplot
keeps every figure alive until closed and switching its global backend
would fight a notebook's inline one."""
import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pagetrace.analysis import metrics, model, waste
from pagetrace.core.escape import escape

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


def _file_colours(*frames):
    """Colour per file: the LEGEND_FILES most read files (over all
    `frames`) get their own."""
    pages = pd.concat([f["path"].astype(str)[~metrics.metadata_rows(f)]
                       for f in frames]).value_counts(
        sort=True) if frames else pd.Series(dtype=int)
    top = [p for p in pages.index[:LEGEND_FILES]]
    cycle = matplotlib.colormaps["tab10"].colors
    return {p: cycle[i % len(cycle)] for i, p in enumerate(top)}


def first_read_us(frame):
    """Timestamp of the first read, the zero of every time axis (None for a
    trace without reads)."""
    reads = metrics.read_records(frame)
    return int(reads["ts_us"].min()) if len(reads) else None


def _draw_offset_time(ax, frame, colours, unused=None):
    """Scatter of offset (MiB) against ms since the first read; `unused`
    (bool per row of `frame`) draws those reads as hollow red rings."""
    t0 = first_read_us(frame)
    ts_ms = (frame["ts_us"].to_numpy() - t0) / 1e3 if len(frame) \
        else np.zeros(0)
    offset_mib = frame["offset"].to_numpy() / MIB
    paths = frame["path"].astype(str).to_numpy()
    metadata = metrics.metadata_rows(frame) if len(frame) else np.zeros(0, bool)
    if metadata.any():
        _draw_metadata(ax, ts_ms[metadata], offset_mib[metadata], paths[metadata])
        # Files only from here on: device offsets are on an axis of their own.
        paths = np.where(metadata, "", paths)
        if unused is not None:
            unused = unused & ~metadata
    for path, colour in colours.items():
        mine = paths == path
        if mine.any():
            ax.scatter(ts_ms[mine], offset_mib[mine], s=4, color=colour,
                       label=escape(path), linewidths=0)
    others = ~np.isin(paths, list(colours)) & ~metadata
    if others.any():
        ax.scatter(ts_ms[others], offset_mib[others], s=4, color=OTHER_COLOUR,
                   label=f"{len(set(paths[others]))} other files",
                   linewidths=0)
    if unused is not None and unused.any():
        ax.scatter(ts_ms[unused], offset_mib[unused], s=14,
                   facecolors="none", edgecolors="red", linewidths=0.5,
                   label=f"read, never accessed ({int(unused.sum()):,} "
                   "pages)")
    ax.set_xlabel("time since first read (ms)")
    ax.set_ylabel("offset in file (MiB)")
    return ts_ms, offset_mib


def _draw_metadata(ax, ts_ms, offset_mib, devices):
    """Metadata records (device pages) as black crosses against a second
    axis, offset on the device: they are no file's pages."""
    twin = ax.twinx()
    twin.scatter(ts_ms, offset_mib, s=8, marker="x", color="black", linewidths=0.5)
    twin.set_ylabel("metadata: offset on device (MiB)")
    ax.scatter([], [], s=8, marker="x", color="black", linewidths=0.5,
               label=f"metadata, {len(ts_ms):,} pages of "
               + ", ".join(escape(d) for d in sorted(set(devices))))


def plot_offset_time(frame, zoom=False, zoom_fraction=0.1, title=None,
                     mark_unused=False):
    """File offset (MiB) against time since the first read (ms), one colour
    per file. With `zoom`, the axes show only the densest time window
    (`densest_window`) and the offsets read in it. With `mark_unused`
    (a version 2 trace with access records), pages the start read but never
    accessed are ringed in red."""
    unused = unused_reads(frame) if mark_unused else None
    frame_reads = metrics.read_records(frame)
    fig, ax = _subplots((9, 5))
    ts_ms, offset_mib = _draw_offset_time(ax, frame_reads,
                                          _file_colours(frame_reads), unused)
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
    _legend(ax, fontsize="x-small", markerscale=3, loc="best")
    fig.tight_layout()
    return fig


def unused_reads(frame):
    """Per `read` record (in order): True when the page was read but never
    accessed (waste.page_usage's `used` is False). All False for a trace
    without access records, which cannot say."""
    reads = metrics.read_records(frame)
    if not waste.has_access_records(frame):
        return np.zeros(len(reads), dtype=bool)
    usage = waste.page_usage(frame)
    used = usage["used"].to_numpy(dtype=bool)
    never = set(zip(usage["path"].astype(str)[~used],
                    usage["offset"].to_numpy()[~used]))
    return np.fromiter(((p, o) in never for p, o in zip(
        reads["path"].astype(str), reads["offset"].to_numpy())),
        dtype=bool, count=len(reads))


def plot_offset_time_pair(frames, labels):
    """Two traces' offset-time plots side by side on shared axes; a file
    keeps its colour in both."""
    reads = [metrics.read_records(f) for f in frames]
    colours = _file_colours(reads[0], reads[1])
    fig, axes = _subplots((12, 4.8), ncols=2, sharex=True, sharey=True)
    for ax, frame, label in zip(axes, reads, labels):
        _draw_offset_time(ax, frame, colours)
        ax.set_title(f"{label}: {len(frame) * _page_size(frame) / MIB:,.1f}"
                     " MiB read")
        _legend(ax, fontsize="xx-small", markerscale=3, loc="best")
    axes[1].set_ylabel("")
    fig.tight_layout()
    return fig


def _page_size(frame):
    return int(frame.attrs.get("page_size", 4096))


# --- waterfall ----------------------------------------------------------

# Colour per read cause (trace -x `cause` column); one fixed colour each, so
# that two figures and two runs agree.
CAUSE_COLOURS = {"fault": "tab:blue", "read": "tab:green",
                 "sync_ra": "tab:orange", "async_ra": "tab:purple",
                 "forced_ra": "tab:red", "-": "0.45",
                 "no cause recorded": "tab:cyan", "mixed": OTHER_COLOUR}
NO_CAUSE = "no cause recorded"
WATERFALL_FILES = 30


def _dominant(values):
    counts = values.value_counts()
    return str(counts.index[0]) if len(counts) else NO_CAUSE


# Key of the folded row ("N other files"): no path holds a NUL byte.
FOLDED = "\0folded"


def _row_key(row):
    return FOLDED if row.folded else row.path


def waterfall_rows(frame, top=WATERFALL_FILES, paths=None):
    """One row per file for the waterfall, in order of first read: `path`,
    `first_ms`, `last_ms` (ms since the trace's first read), `bytes`,
    `pages`, `cause` (the cause of most of its pages, or "no cause
    recorded" without `trace -x`), `files` and `folded`. The `top` files
    by bytes get a row each (or exactly `paths`, when given); the rest are
    folded into one last row (`folded` True) named "N other files" spanning
    their first to last read."""
    reads = metrics.read_records(frame)
    columns = ["path", "first_ms", "last_ms", "bytes", "pages", "cause",
               "files", "folded"]
    if not len(reads):
        return pd.DataFrame({c: [] for c in columns})
    t0 = int(reads["ts_us"].min())
    page_size = _page_size(frame)
    grouped = reads.groupby("path", observed=True, sort=False)
    table = pd.DataFrame({
        "first_ms": (grouped["ts_us"].min() - t0) / 1e3,
        "last_ms": (grouped["ts_us"].max() - t0) / 1e3,
        "pages": grouped.size(),
    })
    table["bytes"] = table["pages"] * page_size
    table["cause"] = grouped["cause"].agg(_dominant) if "cause" in reads \
        else NO_CAUSE
    table["files"] = 1
    table["folded"] = False
    table.index = table.index.astype(str)
    if paths is None:
        keep = table.sort_values("bytes", ascending=False,
                                 kind="stable").index[:top]
    else:
        keep = [p for p in paths if p in table.index]
    shown = table.loc[list(keep)].sort_values("first_ms", kind="stable")
    rest = table.drop(index=list(keep))
    rows = shown.reset_index(names="path")
    if len(rest):
        folded = {"path": f"{len(rest)} other file"
                  + ("s" if len(rest) > 1 else ""),
                  "first_ms": rest["first_ms"].min(),
                  "last_ms": rest["last_ms"].max(),
                  "pages": int(rest["pages"].sum()),
                  "bytes": int(rest["bytes"].sum()),
                  "cause": "mixed", "files": len(rest), "folded": True}
        rows = pd.concat([rows, pd.DataFrame([folded])], ignore_index=True)
    return rows[columns]


def _short_names(paths):
    """File name per path; the last two components where two files share a
    name (`omni.ja` and `browser/omni.ja`)."""
    base = {p: p.rsplit("/", 1)[-1] or p for p in paths}
    seen = pd.Series(list(base.values())).value_counts()
    # Escaped as in traces: a tab or newline in a name stays one line.
    return {p: escape("/".join(p.rsplit("/", 2)[-2:]) if seen[b] > 1 else b)
            for p, b in base.items()}


def _label(path, nbytes, names=None):
    if names is None:  # the folded row: its own words, not a path
        name = path
    else:
        name = names.get(path, escape(path.rsplit("/", 1)[-1] or path))
    if len(name) > 32:
        name = name[:14] + "…" + name[-17:]
    size = f"{nbytes / MIB:,.1f} MiB" if nbytes >= MIB else \
        f"{nbytes / 1024:,.0f} KiB"
    return f"{name}  {size}"


def _read_instants(frame, rows):
    """Per waterfall row, the distinct times (ms, to 0.5 ms) at which it
    read, so a long bar shows whether it read throughout or twice."""
    reads = metrics.read_records(frame)
    if not len(reads):
        return {}
    ms = np.round((reads["ts_us"].to_numpy() - reads["ts_us"].min())
                  / 500.0) / 2.0
    paths = reads["path"].astype(str).to_numpy()
    named = list(rows["path"][~rows["folded"].astype(bool)])
    instants = {path: np.unique(ms[paths == path]) for path in named}
    if rows["folded"].astype(bool).any():
        instants[FOLDED] = np.unique(ms[~np.isin(paths, named)])
    return instants


def _draw_waterfall(ax, rows, span_ms, max_bytes, y_of=None, instants=None):
    """Bars from first to last read; thickness grows with the square root
    of the bytes (so a 1 MiB file still shows next to a 170 MiB one);
    colour by cause; a dark tick at each instant the file was read. A file
    read in one instant still gets a visible sliver."""
    min_width = max(span_ms, 1e-3) * 0.004
    y_of = y_of or {_row_key(r): i for i, r in enumerate(rows.itertuples())}
    for row in rows.itertuples():
        thickness = 0.25 + 0.65 * np.sqrt(row.bytes / max_bytes) \
            if max_bytes else 0.5
        colour = CAUSE_COLOURS.get(row.cause, OTHER_COLOUR)
        y = y_of[_row_key(row)]
        ax.barh(y, max(row.last_ms - row.first_ms, min_width),
                left=row.first_ms, height=thickness, color=colour,
                edgecolor="none", alpha=0.55)
        times = (instants or {}).get(_row_key(row))
        if times is not None and len(times):
            ax.vlines(times, y - thickness / 2, y + thickness / 2,
                      colors="0.1", linewidths=0.4)
    ax.set_xlabel("time since first read (ms)")
    ax.set_ylim(max(len(y_of), 1) - 0.5, -0.5)


def _legend(ax, **kwargs):
    """A legend when something is labelled (an empty trace has nothing,
    and matplotlib would warn)."""
    if any(not label.startswith("_")
           for label in ax.get_legend_handles_labels()[1]):
        ax.legend(**kwargs)


def _cause_legend(ax, causes):
    if not len(causes):
        return
    from matplotlib.patches import Patch
    handles = [Patch(color=CAUSE_COLOURS.get(c, OTHER_COLOUR), label=c)
               for c in sorted(set(causes))]
    ax.legend(handles=handles, title="cause of most pages",
              fontsize="x-small", title_fontsize="x-small", loc="best")


def plot_waterfall(frame, top=WATERFALL_FILES, title=None):
    """The file waterfall: one row per file (the `top` by bytes, in order
    of first read; the rest folded into one grey row), a bar from its first
    to its last read, coloured by cause, thicker for more bytes."""
    rows = waterfall_rows(frame, top)
    fig, ax = _subplots((10, 1.2 + 0.26 * max(len(rows), 1)))
    span = float(rows["last_ms"].max()) if len(rows) else 0.0
    _draw_waterfall(ax, rows, span, float(rows["bytes"].max() or 0)
                    if len(rows) else 0, instants=_read_instants(frame, rows))
    names = _short_names(rows["path"][~rows["folded"].astype(bool)])
    ax.set_yticks(range(len(rows)),
                  [_label(r.path, r.bytes, None if r.folded else names)
                   for r in rows.itertuples()], fontsize="x-small")
    _cause_legend(ax, rows["cause"])
    ax.set_title(title or f"files by first read (top {min(top, len(rows))} "
                 "by bytes; bar: first to last read)")
    fig.tight_layout()
    return fig


def plot_waterfall_pair(frames, labels, top=WATERFALL_FILES):
    """Two traces' waterfalls on shared axes: the same files on the same
    rows (the union of each run's `top` by bytes, in order of first read in
    the first run that read them), the same time scale."""
    tops = [waterfall_rows(f, top) for f in frames]
    paths = []
    for rows in tops:
        for row in rows.itertuples():
            if not row.folded and row.path not in paths:
                paths.append(row.path)
    pairs = [waterfall_rows(f, paths=paths) for f in frames]
    files = pd.concat([r.loc[~r["folded"].astype(bool), ["path", "first_ms"]]
                       for r in pairs])
    names = list(files.groupby("path", sort=False)["first_ms"].min()
                 .sort_values(kind="stable").index)
    folded = any(r["folded"].astype(bool).any() for r in pairs)
    y_of = {p: i for i, p in enumerate(names)}
    y_of[FOLDED] = len(names)
    span = max([float(r["last_ms"].max()) for r in pairs if len(r)] or [0])
    biggest = max([float(r["bytes"].max()) for r in pairs if len(r)] or [0])
    fig, axes = _subplots((13, 1.4 + 0.26 * (len(names) + 1)), ncols=2,
                          sharex=True, sharey=True)
    sizes = {}
    for rows in pairs:
        for r in rows.itertuples():
            sizes[_row_key(r)] = max(sizes.get(_row_key(r), 0), r.bytes)
    for ax, frame, rows, label in zip(axes, frames, pairs, labels):
        _draw_waterfall(ax, rows, span, biggest, y_of,
                        _read_instants(frame, rows))
        ax.set_title(label)
        ax.set_xlim(0, span * 1.02 if span else 1)
        _cause_legend(ax, rows["cause"])
    short = _short_names(names)
    labels_y = [_label(p, sizes.get(p, 0), short) for p in names]
    if folded:
        labels_y.append(f"other files  ≤ {sizes[FOLDED] / MIB:,.1f} MiB")
    axes[0].set_yticks(range(len(labels_y)), labels_y, fontsize="x-small")
    axes[0].set_ylim(max(len(labels_y), 1) - 0.5, -0.5)
    fig.tight_layout()
    return fig


def plot_used_vs_read(usage, page_size=4096, top=WATERFALL_FILES):
    """Per file (the `top` by pages read): pages read (light bar), pages
    used (accessed; dark bar) and pages only mapped by fault-around
    (hatched: possibly used without an event), in MiB. `usage` is
    `waste.page_usage(frame)`: one row per page read."""
    table = pd.DataFrame({
        "path": usage["path"].astype(str), "read": 1,
        "used": usage["used"].to_numpy(dtype=bool).astype(int),
        "mapped": usage["mapped"].to_numpy(dtype=bool).astype(int)})
    table = table.groupby("path", sort=False).sum().sort_values(
        "read", ascending=False, kind="stable").head(top)
    fig, ax = _subplots((9, 1.2 + 0.26 * max(len(table), 1)))
    y = np.arange(len(table))
    size = MIB / page_size
    ax.barh(y, table["read"] / size, color="tab:blue", alpha=0.3,
            label="read")
    ax.barh(y, table["used"] / size, color="tab:blue", label="used "
            "(accessed)")
    ax.barh(y, table["mapped"] / size, left=table["used"] / size,
            color="none", edgecolor="tab:blue", hatch="////", linewidth=0,
            label="only mapped by fault-around")
    names = _short_names(table.index)
    ax.set_yticks(y, [_label(p, r * page_size, names) for p, r in
                      zip(table.index, table["read"])], fontsize="x-small")
    ax.set_ylim(max(len(table), 1) - 0.5, -0.5)
    ax.set_xlabel("MiB")
    ax.set_title("pages used against pages read, per file")
    ax.legend(fontsize="x-small", loc="lower right")
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
    fig, ax = _subplots((_startup_width(len(table)), 4))
    ax.bar(list(table.index), mean, yerr=error, capsize=6, color="tab:blue")
    ax.set_ylabel(f"{column.removesuffix('_s')} time (ms), mean ± 95% CI")
    ax.set_title("start-up time per cache state")
    legible_xticks(fig, ax)
    return fig


def _startup_width(states):
    """Inches: room for the bars of any number of states."""
    return max(7.0, 0.6 * states + 2.0)


def label_boxes(fig, ax):
    """The x tick labels' boxes as drawn (display units), non-empty ones."""
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in ax.get_xticklabels()
            if t.get_visible() and t.get_text()]


def boxes_overlap(boxes):
    """Whether any two boxes intersect."""
    return any(a.overlaps(b) for i, a in enumerate(boxes)
               for b in boxes[i + 1:])


def legible_xticks(fig, ax):
    """Lay the x tick labels out flat, then slanted, then upright: the
    first way in which no two of them intersect (upright always fits, the
    figure being wide enough for a label height per tick)."""
    for rotation, align in ((0, "center"), (30, "right"), (90, "center")):
        for label in ax.get_xticklabels():
            label.set_rotation(rotation)
            label.set_horizontalalignment(align)
            label.set_rotation_mode("anchor" if rotation == 30 else "default")
        fig.tight_layout()
        if not boxes_overlap(label_boxes(fig, ax)):
            return


def plot_startup_pair(tables, labels, column="total_s"):
    """Two runs' start-up times per state side by side (mean ± 95% CI),
    on one axis: for each state present in either, run A's bar then B's."""
    states = [s for s in dict.fromkeys(list(tables[0].index) +
                                       list(tables[1].index))]
    fig, ax = _subplots((_startup_width(len(states)) + 1, 4.2))
    x = np.arange(len(states))
    width = 0.38
    for i, (table, label, colour) in enumerate(
            zip(tables, labels, ("tab:blue", "tab:orange"))):
        table = table.reindex(states)
        mean = table[f"{column}_mean"].to_numpy(dtype=float) * 1e3
        low = table[f"{column}_low"].to_numpy(dtype=float) * 1e3
        high = table[f"{column}_high"].to_numpy(dtype=float) * 1e3
        error = np.vstack((np.nan_to_num(mean - low),
                           np.nan_to_num(high - mean)))
        ax.bar(x + (i - 0.5) * width, np.nan_to_num(mean), width, yerr=error,
               capsize=4, color=colour, label=label)
    ax.set_xticks(x, states)
    ax.set_ylabel(f"{column.removesuffix('_s')} time (ms), mean ± 95% CI")
    ax.set_title("start-up time per cache state")
    ax.legend(fontsize="small")
    legible_xticks(fig, ax)
    return fig


def save_figure(fig, stem):
    """Write `stem`.png and `stem`.svg; returns both paths."""
    paths = [f"{stem}.png", f"{stem}.svg"]
    fig.savefig(paths[0], dpi=110)
    fig.savefig(paths[1])
    return paths

"""Seek-cost models: how long a sequence of requests takes on a disk.

HDD: each request costs a fixed command overhead, plus, when it is a seek,
the seek time for its distance and on average half a revolution of
rotational latency, plus its bytes at the media transfer rate. The seek
curve follows Ruemmler and Wilkes ("An introduction to disk drive
modeling", 1994): short seeks are dominated by acceleration and grow with
the square root of the distance, long ones coast and grow linearly.

SSD: a per-request cost plus the bytes at the bandwidth.

Throttle (ThrottleModel): a device emulated by blk-throttle, where a run
takes the larger of reads / riops and bytes / rbps, wherever the reads are.

Defaults describe a 7,200 rpm 3.5" desktop disk of about 1 TB, from the
usual datasheet figures: 8.5 ms average seek (the time at one third of the
full stroke, the mean distance between two random positions), 1 ms
track-to-track, 16 ms full stroke, 150 MB/s sustained transfer. The SSD
defaults are a SATA drive at queue depth 1: 0.1 ms per request, 500 MB/s.

Distances are in bytes. NaN means unknown (a jump between two files when
only file offsets are known, or the first request, whose head position is
unknown); the HDD model charges an unknown distance as
`unknown_distance_fraction` of the capacity, one third by default: the
average seek, the honest guess when nothing is known about placement.
"""
from dataclasses import asdict, dataclass

import numpy as np

from pagetrace.analysis import metrics


@dataclass
class HDDModel:
    rpm: float = 7200.0
    transfer_bytes_per_s: float = 150e6
    capacity_bytes: float = 1e12
    track_to_track_ms: float = 1.0
    # Where the square-root part of the curve meets the linear part, as a
    # fraction of the full stroke, and the seek time there. With the other
    # defaults the curve gives 8.5 ms at one third of the stroke.
    boundary_fraction: float = 0.2
    boundary_ms: float = 7.0
    full_stroke_ms: float = 16.0
    per_request_ms: float = 0.1
    unknown_distance_fraction: float = 1.0 / 3.0

    @property
    def rotational_latency_ms(self):
        """Half a revolution: the mean wait for the sector to come round."""
        return 0.5 * 60_000.0 / self.rpm

    def seek_ms(self, distance_bytes):
        """Seek time in ms for each distance (0 for no movement)."""
        distance = np.asarray(distance_bytes, dtype=float)
        distance = np.where(np.isnan(distance),
                            self.unknown_distance_fraction
                            * self.capacity_bytes, distance)
        fraction = np.clip(distance / self.capacity_bytes, 0.0, 1.0)
        short = self.track_to_track_ms + (
            self.boundary_ms - self.track_to_track_ms) * np.sqrt(
                fraction / self.boundary_fraction)
        long = self.boundary_ms + (self.full_stroke_ms - self.boundary_ms) * (
            fraction - self.boundary_fraction) / (1.0 - self.boundary_fraction)
        return np.where(distance == 0, 0.0,
                        np.where(fraction <= self.boundary_fraction, short,
                                 long))

    def request_ms(self, lengths, seeks, distances):
        """Time of each request in ms."""
        lengths = np.asarray(lengths, dtype=float)
        seeks = np.asarray(seeks, dtype=bool)
        positioning = np.where(
            seeks, self.seek_ms(distances) + self.rotational_latency_ms, 0.0)
        return (self.per_request_ms + positioning
                + lengths / self.transfer_bytes_per_s * 1e3)

    def total_s(self, lengths, seeks, distances):
        return float(self.request_ms(lengths, seeks, distances).sum() / 1e3)


@dataclass
class SSDModel:
    per_request_ms: float = 0.1
    bandwidth_bytes_per_s: float = 500e6

    def total_s(self, lengths, seeks=None, distances=None):
        lengths = np.asarray(lengths, dtype=float)
        return float(len(lengths) * self.per_request_ms / 1e3
                     + lengths.sum() / self.bandwidth_bytes_per_s)


def _with_first_seek(seeks):
    """The head starts at an unknown place, so the first request seeks."""
    seek = seeks["seek"].to_numpy().copy()
    if len(seek):
        seek[0] = True
    return seek


def predict_requests(requests, seeks, hdd=None, ssd=None):
    """Modelled HDD and SSD seconds for requests with their seek table."""
    hdd = hdd or HDDModel()
    ssd = ssd or SSDModel()
    lengths = requests["length"].to_numpy()
    seek = _with_first_seek(seeks)
    distance = seeks["distance"].to_numpy()
    return {"hdd_s": hdd.total_s(lengths, seek, distance),
            "ssd_s": ssd.total_s(lengths)}


def predict_trace(frame, hdd=None, ssd=None, page_size=None,
                  max_request_bytes=metrics.DEFAULT_MAX_REQUEST_BYTES):
    """Original against file-sorted order for a trace (file-offset space)."""
    original = metrics.group_requests(frame, page_size, max_request_bytes)
    by_file = metrics.sort_by_file(frame, page_size, max_request_bytes)
    return {
        "original": predict_requests(original, metrics.file_seeks(original),
                                     hdd, ssd),
        "sorted": predict_requests(by_file, metrics.file_seeks(by_file),
                                   hdd, ssd),
    }


def predict_plan(plan, hdd=None, ssd=None,
                 max_request_bytes=metrics.DEFAULT_MAX_REQUEST_BYTES):
    """Original against on-disk order for a replay plan (physical space)."""
    on_disk = metrics.sort_plan_physically(plan, max_request_bytes)
    return {
        "original": predict_requests(plan, metrics.physical_seeks(plan),
                                     hdd, ssd),
        "sorted": predict_requests(on_disk, metrics.physical_seeks(on_disk),
                                   hdd, ssd),
    }


# --- fitting to measured replay runs ----------------------------------

# Features of a replay --json run the linear models are fitted on.
FIT_FEATURES = {
    "ssd": ("requests", "bytes"),
    "hdd": ("requests", "seeks", "bytes"),
}


def _nonnegative_lstsq(matrix, target):
    """Least squares with every coefficient >= 0 (a small active set:
    drop the most negative coefficient and solve again). Negative costs
    have no physical meaning."""
    # Bytes are ~1e7 times larger than request counts; scaling each column
    # to unit norm keeps the solve well conditioned.
    scale = np.linalg.norm(matrix, axis=0)
    scale[scale == 0] = 1.0
    scaled = matrix / scale
    active = list(range(matrix.shape[1]))
    coefficients = np.zeros(matrix.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(scaled[:, active], target, rcond=None)
        if (solution >= 0).all():
            coefficients[active] = solution
            break
        active.pop(int(np.argmin(solution)))
    return coefficients / scale


@dataclass
class Fit:
    kind: str
    coefficients: dict       # seconds per unit of each feature
    measured_s: list
    predicted_s: list
    rms_error_s: float
    max_relative_error: float
    determined: bool         # more runs than parameters

    def predict(self, run):
        return sum(self.coefficients[k] * run[k] for k in self.coefficients)

    def as_dict(self):
        return asdict(self)


def fit_runs(runs, kind="hdd"):
    """Least-squares fit of a linear cost model to replay --json runs.

    kind "ssd": elapsed = a·requests + b·bytes.
    kind "hdd": elapsed = a·requests + c·seeks + b·bytes, where c is the
    mean cost of a seek (seek time plus rotational latency) on that disk.
    With no more runs than parameters the fit is exact and says nothing
    about the error: `determined` is then False.
    """
    features = FIT_FEATURES[kind]
    matrix = np.array([[float(run[f]) for f in features] for run in runs])
    measured = np.array([float(run["elapsed_s"]) for run in runs])
    coefficients = _nonnegative_lstsq(matrix, measured)
    predicted = matrix @ coefficients
    relative = np.abs(predicted - measured) / measured
    return Fit(kind=kind,
               coefficients=dict(zip(features, coefficients.tolist())),
               measured_s=measured.tolist(), predicted_s=predicted.tolist(),
               rms_error_s=float(np.sqrt(np.mean((predicted - measured)**2))),
               max_relative_error=float(relative.max()),
               determined=len(runs) > len(features))


def hdd_from_fit(fit, base=None):
    """An HDDModel whose overhead and transfer rate come from a fit."""
    base = base or HDDModel()
    params = asdict(base)
    if fit.coefficients.get("bytes"):
        params["transfer_bytes_per_s"] = 1.0 / fit.coefficients["bytes"]
    params["per_request_ms"] = fit.coefficients.get("requests", 0.0) * 1e3
    return HDDModel(**params)


# --- devices emulated with blk-throttle (replay --throttle) -------------

@dataclass
class ThrottleModel:
    """A device emulated by the kernel's blk-throttle at `riops` reads and
    `rbps` bytes a second (replay --throttle, startup-bench --throttle).

    This is the SSD model's request-cost and bandwidth part with the
    throttle's rule for combining them. blk-throttle dispatches a bio once
    both budgets allow it (tg_may_dispatch() in block/blk-throttle.c waits
    for the larger of the iops and the bps wait), so over a run the time is
    the larger of ios / riops and bytes / rbps, not their sum as on a real
    disk, where positioning and transfer add up. The kernel counts bios
    after splitting: a request longer than the device takes in one bio
    (`max_bio_bytes`: max_segments pages, or max_sectors_kb, whichever is
    less) counts as several reads.

    What a throttle cannot emulate: seek time that depends on distance.
    Every read costs 1 / riops wherever it is, so on-disk order, which on
    a spinning disk turns seeks into short ones or none (HDDModel), changes
    nothing under a throttle except through the number of requests it
    makes; the 150-IOPS profile is a disk whose every read is a short seek.
    """
    riops: float
    rbps: float = float("inf")
    max_bio_bytes: float = float("inf")

    def ios(self, lengths):
        """Reads the kernel counts for requests of `lengths` bytes."""
        lengths = np.asarray(lengths, dtype=float)
        return float(np.ceil(lengths / self.max_bio_bytes).clip(min=1).sum())

    def total_s(self, lengths, seeks=None, distances=None):
        lengths = np.asarray(lengths, dtype=float)
        return self.time_s(self.ios(lengths), float(lengths.sum()))

    def time_s(self, ios, nbytes):
        return max(ios / self.riops, nbytes / self.rbps)


def fit_throttle(runs):
    """riops and rbps of a ThrottleModel from measured runs (dicts with
    `ios`, `bytes`, `elapsed_s`), as the lower envelope: a throttled run
    takes at least ios / riops and bytes / rbps, with equality for the
    limit that binds, so riops is the highest ios / elapsed_s seen and rbps
    the highest bytes / elapsed_s. Each needs at least one run that its
    limit binds (short requests for riops, long ones for rbps)."""
    riops = max(run["ios"] / run["elapsed_s"] for run in runs)
    rbps = max(run["bytes"] / run["elapsed_s"] for run in runs)
    return ThrottleModel(riops=riops, rbps=rbps)


def relative_errors(model, runs):
    """(predicted - measured) / measured of each run."""
    return [(model.time_s(run["ios"], run["bytes"]) - run["elapsed_s"])
            / run["elapsed_s"] for run in runs]


# --- the HDD model's parameters from replays on a known disk -------------

def seek_growth_terms(distances, capacity_bytes, boundary_fraction):
    """Per request, the coefficients of (1, boundary_ms - track_to_track_ms,
    full_stroke_ms - track_to_track_ms) in HDDModel.seek_ms, once the
    boundary's place is fixed: seek = t2t + dB * g1 + dF * g2. Rows of
    zeros for no movement."""
    f = np.clip(np.asarray(distances, dtype=float) / capacity_bytes, 0, 1)
    b = boundary_fraction
    h_short = np.sqrt(np.minimum(f, b) / b)
    h_long = np.clip((f - b) / (1 - b), 0, 1)
    short = f <= b
    terms = np.stack([np.ones_like(f), np.where(short, h_short, 1 - h_long),
                      np.where(short, 0.0, h_long)], axis=1)
    return np.where((f > 0)[:, None], terms, 0.0)


def fit_hdd(runs, capacity_bytes, boundary_fraction=0.2, rotation_ms=None):
    """An HDDModel from replays of scattered reads on a disk. Each run is a
    dict: `elapsed_s`, `distances` (bytes, one per read), `requests`,
    `bytes`, and the per-request cost `per_request_s` and media rate
    `bytes_per_s` measured apart (runs of sequential reads).

    Every read that moves the head pays a rotational wait and at least the
    track-to-track time, so replays' times determine only their sum (the
    access constant) and how the seek grows with distance: least squares
    (non-negative) of
        elapsed - requests * per_request - bytes / rate
          = moves * (rotation + t2t) + sum of dB * g1 + dF * g2
    The split needs one of the two from elsewhere: ROTATION_MS (the
    datasheet's rpm gives it, or fit_hdd_latencies from each read's
    latency); without it the whole constant is taken as
    rotation and the track-to-track time is 0. Returns (HDDModel, Fit)."""
    per_request = runs[0]["per_request_s"]
    rate = runs[0]["bytes_per_s"]
    rows, target = [], []
    for run in runs:
        rows.append(seek_growth_terms(run["distances"], capacity_bytes,
                                      boundary_fraction).sum(axis=0) / 1e3)
        target.append(run["elapsed_s"] - run["requests"] * per_request
                      - run["bytes"] / rate)
    matrix, target = np.array(rows), np.array(target)
    access_ms, rise_b, rise_f = _nonnegative_lstsq(matrix, target)
    rotation = access_ms if rotation_ms is None else rotation_ms
    t2t = access_ms - rotation
    model = HDDModel(rpm=30_000.0 / rotation if rotation > 0 else float("inf"),
                     transfer_bytes_per_s=rate, capacity_bytes=capacity_bytes,
                     track_to_track_ms=t2t,
                     boundary_fraction=boundary_fraction,
                     boundary_ms=t2t + rise_b, full_stroke_ms=t2t + rise_f,
                     per_request_ms=per_request * 1e3)
    elapsed = np.array([r["elapsed_s"] for r in runs])
    predicted = elapsed - target + matrix @ np.array([access_ms, rise_b, rise_f])
    fit = Fit(kind="hdd-curve",
              coefficients={"access_ms": access_ms,
                            "boundary_rise_ms": rise_b,
                            "full_stroke_rise_ms": rise_f},
              measured_s=elapsed.tolist(), predicted_s=predicted.tolist(),
              rms_error_s=float(np.sqrt(np.mean((predicted - elapsed) ** 2))),
              max_relative_error=float((np.abs(predicted - elapsed)
                                        / elapsed).max()),
              determined=len(runs) > 3)
    return model, fit


def mean_seek_ms(model, span_bytes=None, steps=20000):
    """The model's mean seek over random pairs of positions in a span (the
    datasheet's average seek over the whole disk by default)."""
    span = span_bytes or model.capacity_bytes
    x = (np.arange(steps) + 0.5) * span / steps
    return float(np.sum(model.seek_ms(x) * 2 * (span - x) / span ** 2)
                 * span / steps)


# --- the HDD model from each read's latency: rotation split from seek -----

@dataclass
class LatencyFit:
    """What fit_hdd_latencies found, in ms: the seek curve's constant and
    rises, the revolution, and how many reads it came from."""
    track_to_track_ms: float
    boundary_rise_ms: float
    full_stroke_rise_ms: float
    revolution_ms: float
    reads: int

    def as_dict(self):
        return asdict(self)


def fit_hdd_latencies(distances, latencies_s, lengths, capacity_bytes,
                      per_request_s, bytes_per_s, boundary_fraction=0.2,
                      min_distance_bytes=0.0):
    """An HDDModel from the latencies of single reads at queue depth 1,
    each with the distance its head moved, that splits rotation from seek.

    A read that moves the head costs per_request + seek(distance) + a
    rotational wait + length / rate. At a given distance the seek is fixed,
    while the wait of a read at a random angle is uniform over one
    revolution T: the reads' positioning times (latency less per-request
    and transfer) lie in a band of width T above the seek curve. So:

    1. least squares of the positioning time on the curve's terms
       (seek_growth_terms: a constant, the rise to the boundary, the rise
       to the full stroke) gives the curve's shape, whatever T;
    2. the residuals are then the wait, uniform over [0, T) plus noise,
       less its mean: their quantile at q is q * T above the curve, a
       straight line in q of slope T whose value at q = 0 is the lower
       envelope, the seek curve itself. The line is fitted to the
       quantiles from 10% to 90%, not to the extremes, so that a few reads
       delayed by the host (upper tail) or served by the drive's buffer
       (lower tail) do not move it.

    Reads closer than min_distance_bytes to the head (the drive's
    read-ahead buffer may serve them) are left out. Returns (HDDModel,
    LatencyFit)."""
    distances = np.asarray(distances, dtype=float)
    keep = distances > max(min_distance_bytes, 0.0)
    positioning = (np.asarray(latencies_s, dtype=float)[keep] - per_request_s
                   - np.asarray(lengths, dtype=float)[keep] / bytes_per_s)
    terms = seek_growth_terms(distances[keep], capacity_bytes,
                              boundary_fraction)
    ms = positioning * 1e3
    coefficients, *_ = np.linalg.lstsq(terms, ms, rcond=None)
    residual = ms - terms @ coefficients
    levels = np.linspace(0.1, 0.9, 81)
    revolution, envelope = np.polyfit(levels, np.quantile(residual, levels),
                                      1)
    t2t = coefficients[0] + envelope
    rise_b, rise_f = coefficients[1], coefficients[2]
    model = HDDModel(rpm=60_000.0 / revolution if revolution > 0
                     else float("inf"),
                     transfer_bytes_per_s=bytes_per_s,
                     capacity_bytes=capacity_bytes, track_to_track_ms=t2t,
                     boundary_fraction=boundary_fraction,
                     boundary_ms=t2t + rise_b, full_stroke_ms=t2t + rise_f,
                     per_request_ms=per_request_s * 1e3)
    return model, LatencyFit(track_to_track_ms=float(t2t),
                             boundary_rise_ms=float(rise_b),
                             full_stroke_rise_ms=float(rise_f),
                             revolution_ms=float(revolution),
                             reads=int(keep.sum()))

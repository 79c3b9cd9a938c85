"""A trace as a Perfetto protobuf trace (`.pftrace`), for ui.perfetto.dev
and its trace processor.

Written with the `perfetto` package's official schema
(`perfetto_trace_pb2`) and its streaming trace builder:

* a track per process (`pid`) and per thread (`tid`) of a `trace -x` trace;
  a trace without those columns has one track, named by its command;
* each read request a slice on its thread's track, named by the file, with
  `offset`, `length`, `pages` and `cause` arguments. A request is the
  replay rule's, per thread: consecutive pages of one file, adjacent in
  offset, of one cause. It starts at its first page's timestamp and ends at
  its last's (the trace records when each page was queued, not when it
  completed);
* each `access` and `map` record (`trace --used`) an instant event on its
  thread's track, named by the file, in the category `access` or `map`;
* per file, a counter track of the MiB read so far.

Timestamps are the trace's own (CLOCK_REALTIME µs) in ns. The file is a
sequence of `Trace` messages of one packet each; the first packet clears
the sequence's incremental state, as the trace processor requires of track
events.
"""
import numpy as np
import pandas as pd

from pagetrace.analysis import metrics
from pagetrace.core.escape import escape

MIB = 1 << 20
SEQUENCE_ID = 1
# Categories of the instant events: the record kinds of trace --used.
INSTANT_KINDS = ("access", "map")


class PerfettoUnavailable(RuntimeError):
    """The `perfetto` package (pagetrace[perfetto]) is not installed."""


def schema():
    """The official schema module and the streaming builder."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
        from perfetto.trace_builder.proto_builder import \
            StreamingTraceProtoBuilder
    except ImportError as err:
        raise PerfettoUnavailable(
            f"needs the perfetto package ({err}): pip install "
            "'pagetrace[perfetto]'") from None
    return perfetto_trace_pb2, StreamingTraceProtoBuilder


def _text_column(frame, name):
    """A column as strings ('' where missing), or None without it."""
    if name not in frame.columns:
        return None
    return frame[name].astype(object).where(frame[name].notna(), "") \
        .astype(str).to_numpy()


class _Writer:
    """Packets on one trusted sequence, the first one clearing its state."""

    def __init__(self, out):
        self.pb, builder = schema()
        self.builder = builder(out)
        self.first = True
        self.next_uuid = 1

    def packet(self, ts_ns=None):
        packet = self.builder.create_packet()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        if self.first:
            packet.sequence_flags = \
                self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        if ts_ns is not None:
            packet.timestamp = int(ts_ns)
        return packet

    def write(self, packet):
        self.builder.write_packet(packet)

    def track(self, name, process=None, thread=None, counter_unit=None):
        """Declares a track; returns its uuid."""
        uuid = self.next_uuid
        self.next_uuid += 1
        packet = self.packet()
        track = packet.track_descriptor
        track.uuid = uuid
        track.name = name
        if process is not None:
            track.process.pid, track.process.process_name = process
        if thread is not None:
            (track.thread.pid, track.thread.tid,
             track.thread.thread_name) = thread
        if counter_unit is not None:
            track.counter.unit_name = counter_unit
        self.write(packet)
        return uuid

    def event(self, ts_ns, track, kind, name=None, category=None, args=(),
              value=None):
        packet = self.packet(ts_ns)
        event = packet.track_event
        event.type = kind
        event.track_uuid = track
        if name is not None:
            event.name = name
        if category is not None:
            event.categories.append(category)
        for key, arg in args:
            annotation = event.debug_annotations.add()
            annotation.name = key
            if isinstance(arg, str):
                annotation.string_value = arg
            else:
                annotation.int_value = int(arg)
        if value is not None:
            event.double_counter_value = float(value)
        self.write(packet)


def _name(text):
    """A name for the schema's UTF-8 strings: escaped like a trace's path;
    bytes that are not UTF-8 (kept by surrogateescape) as U+FFFD; spaces
    stay spaces."""
    return escape(text).replace("\\040", " ").encode("utf-8", "surrogateescape").decode(
        "utf-8", "replace")


def _int_or_zero(text):
    return int(text) if text.isdigit() else 0


def _thread_tracks(writer, frame, command):
    """Declares the process and thread tracks; returns each row's track
    uuid (an array) and the tracks' names by uuid."""
    pids, tids = _text_column(frame, "pid"), _text_column(frame, "tid")
    comms = _text_column(frame, "comm")
    names = {}
    if pids is None or tids is None:
        uuid = writer.track(f"pagetrace: {command}")
        names[uuid] = command
        return np.full(len(frame), uuid, dtype=np.int64), names
    if comms is None:
        comms = np.full(len(frame), "", dtype=object)
    threads = {}
    for pid, tid, comm in zip(pids, tids, comms):
        threads.setdefault((pid, tid), comm)
    processes = {}
    for (pid, tid), comm in threads.items():
        # A process is named by its main thread, else its first thread.
        if pid not in processes or tid == pid:
            processes[pid] = comm
    for pid, comm in processes.items():
        name = f"{_name(comm) or 'process'} {pid}" if pid else \
            "records without a process"
        uuid = writer.track(name, process=(_int_or_zero(pid), name))
        names[uuid] = name
    track_of = {}
    for (pid, tid), comm in threads.items():
        name = f"{_name(comm) or 'thread'} {tid}" if tid else \
            "records without a thread"
        uuid = writer.track(name, thread=(_int_or_zero(pid),
                                          _int_or_zero(tid), name))
        names[uuid] = name
        track_of[(pid, tid)] = uuid
    rows = np.fromiter((track_of[(p, t)] for p, t in zip(pids, tids)),
                       dtype=np.int64, count=len(frame))
    return rows, names


def read_requests(reads, tracks, page_size):
    """The read requests of the `read` rows: per thread track, in time
    order (trace order among equal timestamps), consecutive pages of one
    file adjacent in offset and of one cause. Returns a list of dicts:
    track, path, offset, length, pages, cause, first_us, last_us."""
    if len(reads) == 0:
        return []
    ts = reads["ts_us"].to_numpy()
    order = np.lexsort((ts, tracks))
    ts, tracks = ts[order], tracks[order]
    codes, categories = pd.factorize(reads["path"].astype(str))
    paths = codes[order]
    offsets = reads["offset"].to_numpy()[order]
    causes = _text_column(reads, "cause")
    causes = causes[order] if causes is not None else \
        np.full(len(reads), "", dtype=object)
    new = np.ones(len(reads), dtype=bool)
    new[1:] = ((tracks[1:] != tracks[:-1]) | (paths[1:] != paths[:-1])
               | (offsets[1:] != offsets[:-1] + page_size)
               | (causes[1:] != causes[:-1]))
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(reads)) - 1
    return [{"track": int(tracks[s]), "path": str(categories[paths[s]]),
             "offset": int(offsets[s]),
             "length": int(e - s + 1) * page_size, "pages": int(e - s + 1),
             "cause": str(causes[s]), "first_us": int(ts[s]),
             "last_us": int(ts[e])}
            for s, e in zip(starts, ends)]


def _write_reads(writer, requests, page_size):
    begin = writer.pb.TrackEvent.TYPE_SLICE_BEGIN
    end = writer.pb.TrackEvent.TYPE_SLICE_END
    for q in requests:
        args = [("offset", q["offset"]), ("length", q["length"]),
                ("pages", q["pages"])]
        if q["cause"]:
            args.append(("cause", q["cause"]))
        writer.event(q["first_us"] * 1000, q["track"], begin,
                     name=_name(q["path"]), category="read", args=args)
        writer.event(q["last_us"] * 1000, q["track"], end)


def _write_counters(writer, requests):
    """Per file, the MiB read by the end of each of its requests."""
    counter = writer.pb.TrackEvent.TYPE_COUNTER
    tracks, read = {}, {}
    for q in sorted(requests, key=lambda q: q["last_us"]):
        path = q["path"]
        if path not in tracks:
            tracks[path] = writer.track(f"MiB read: {_name(path)}",
                                        counter_unit="MiB")
            read[path] = 0
            writer.event(q["first_us"] * 1000, tracks[path], counter, value=0)
        read[path] += q["length"]
        writer.event(q["last_us"] * 1000, tracks[path], counter,
                     value=read[path] / MIB)


def _write_instants(writer, frame, rows, tracks):
    instant = writer.pb.TrackEvent.TYPE_INSTANT
    kinds = frame["kind"].astype(str).to_numpy()
    ts = frame["ts_us"].to_numpy()
    paths = frame["path"].astype(str).to_numpy()
    offsets = frame["offset"].to_numpy()
    for i in np.flatnonzero(rows):
        writer.event(int(ts[i]) * 1000, int(tracks[i]), instant,
                     name=_name(paths[i]), category=kinds[i],
                     args=[("offset", int(offsets[i]))])


def write_perfetto(frame, out):
    """Write `frame` (a trace, version 1 or 2) to the binary stream `out`
    as a Perfetto trace. Returns counts: tracks, read slices, instants."""
    writer = _Writer(out)
    page_size = metrics.page_size_of(frame)
    command = frame.attrs.get("header", {}).get("command", "trace")
    tracks, names = _thread_tracks(writer, frame, _name(command))
    if "kind" in frame.columns:
        kinds = frame["kind"].astype(str).to_numpy()
        is_read = kinds == "read"
        is_instant = np.isin(kinds, INSTANT_KINDS)
    else:
        is_read = np.ones(len(frame), dtype=bool)
        is_instant = np.zeros(len(frame), dtype=bool)
    reads = frame.loc[is_read]
    requests = read_requests(reads, tracks[is_read], page_size)
    _write_reads(writer, requests, page_size)
    _write_counters(writer, requests)
    if is_instant.any():
        _write_instants(writer, frame, is_instant, tracks)
    return {"tracks": writer.next_uuid - 1, "slices": len(requests),
            "instants": int(is_instant.sum())}

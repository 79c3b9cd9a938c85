"""pagetrace export --format perfetto: the timeline parsed back with
Perfetto's official schema (the perfetto package's perfetto_trace_pb2),
checked against the trace's own records read here, line by line."""
import collections
import lzma
import os
import sys

import pytest

from pagetrace import cli

# Installed by scripts/install-deps (pagetrace[perfetto]): not optional here.
from perfetto.protos.perfetto.trace import perfetto_trace_pb2  # noqa: E402
TrackEvent = perfetto_trace_pb2.TrackEvent

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "samples")
PAGE = 4096
MIB = 1 << 20


def sample(name):
    return os.path.join(SAMPLES, name)


def records(text):
    """(ts_us, name, offset, kind, fields) of each record: the name as the
    export shows it (the escaped path, spaces as spaces)."""
    columns, out = [], []
    for line in text.splitlines():
        if line.startswith("# columns: "):
            columns = line[len("# columns: "):].split()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        kind = fields[3] if columns[3:4] == ["kind"] else "read"
        out.append((int(fields[0]), fields[1].replace("\\040", " "),
                    int(fields[2]), kind, dict(zip(columns, fields))))
    return out


def export(capsys, tmp_path, trace):
    out = tmp_path / "out.pftrace"
    code = cli.main(["export", str(trace), "--format", "perfetto",
                     "-o", str(out)])
    err = capsys.readouterr().err
    return code, out, err


def parse(path):
    trace = perfetto_trace_pb2.Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


class Timeline:
    """The parsed file: tracks by uuid, slices, instants, counters."""

    def __init__(self, trace):
        self.tracks, self.slices, self.instants = {}, [], []
        self.counters = collections.defaultdict(list)
        open_slices = {}
        for packet in trace.packet:
            if packet.HasField("track_descriptor"):
                t = packet.track_descriptor
                self.tracks[t.uuid] = t
            if not packet.HasField("track_event"):
                continue
            e = packet.track_event
            assert e.track_uuid in self.tracks, "event before its track"
            if e.type == TrackEvent.TYPE_SLICE_BEGIN:
                assert e.track_uuid not in open_slices, "slices overlap"
                args = {a.name: a.int_value if a.HasField("int_value")
                        else a.string_value for a in e.debug_annotations}
                open_slices[e.track_uuid] = [packet.timestamp, None,
                                             e.name, args, e.track_uuid]
            elif e.type == TrackEvent.TYPE_SLICE_END:
                s = open_slices.pop(e.track_uuid)
                assert packet.timestamp >= s[0]
                s[1] = packet.timestamp
                self.slices.append(s)
            elif e.type == TrackEvent.TYPE_INSTANT:
                self.instants.append((packet.timestamp, e.name,
                                      e.categories[0], e.debug_annotations[0]
                                      .int_value, e.track_uuid))
            elif e.type == TrackEvent.TYPE_COUNTER:
                self.counters[e.track_uuid].append(
                    (packet.timestamp, e.double_counter_value))
        assert not open_slices, "a slice never ends"


def check_against(text, timeline):
    recs = records(text)
    reads = [r for r in recs if r[3] == "read"]
    # The read slices cover exactly the read pages, each record once.
    covered = collections.Counter()
    for begin, end, name, args, _ in timeline.slices:
        assert args["length"] == args["pages"] * PAGE
        for k in range(args["pages"]):
            covered[(name, args["offset"] + k * PAGE)] += 1
    assert covered == collections.Counter((r[1], r[2]) for r in reads)
    # Timestamps within 1 us: each page's record inside its slice.
    slices_of = collections.defaultdict(list)
    for begin, end, name, args, _ in timeline.slices:
        for k in range(args["pages"]):
            slices_of[(name, args["offset"] + k * PAGE)].append((begin, end))
    for ts, name, offset, _, _ in reads:
        assert any(b - 1000 <= ts * 1000 <= e + 1000
                   for b, e in slices_of[(name, offset)]), (name, offset)
    # One instant per access and per map record, at its time.
    want = collections.Counter((ts, name, kind, offset)
                               for ts, name, offset, kind, _ in recs
                               if kind in ("access", "map"))
    got = collections.Counter((round(ts / 1000), name, kind, offset)
                              for ts, name, kind, offset, _ in
                              timeline.instants)
    assert got == want
    # Every track named; counters end at the MiB each file read.
    for track in timeline.tracks.values():
        assert track.name
        if track.HasField("thread"):
            assert track.thread.thread_name and track.thread.tid
        if track.HasField("process"):
            assert track.process.process_name
    per_file = collections.Counter(r[1] for r in reads)
    finals = {timeline.tracks[uuid].name.removeprefix("MiB read: "):
              max(values)[1] for uuid, values in timeline.counters.items()}
    assert finals == pytest.approx({p: n * PAGE / MIB
                                    for p, n in per_file.items()})
    return recs


def test_used_trace_threads_slices_instants(capsys, tmp_path):
    code, out, err = export(capsys, tmp_path, sample("used.log"))
    assert code == 0, err
    text = open(sample("used.log"), encoding="utf-8").read()
    timeline = Timeline(parse(out))
    recs = check_against(text, timeline)
    threads = {(r[4]["pid"], r[4]["tid"]) for r in recs}
    thread_tracks = [t for t in timeline.tracks.values()
                     if t.HasField("thread")]
    assert {(str(t.thread.pid), str(t.thread.tid))
            for t in thread_tracks} == threads
    assert len([t for t in timeline.tracks.values()
                if t.HasField("process")]) == len({p for p, _ in threads})
    # Each slice sits on the track of the thread that read it, with its cause.
    by_uuid = {t.uuid: t.thread for t in thread_tracks}
    assert {(str(by_uuid[s[4]].tid), s[3]["cause"])
            for s in timeline.slices} == {
        (r[4]["tid"], r[4]["cause"]) for r in recs if r[3] == "read"}


def test_many_threads_and_names(capsys, tmp_path):
    # Two processes, three threads, interleaved reads of one file, a name
    # with a space: requests are per thread, never across threads.
    lines = ["# pagetrace-format: 1", "# page-size: 4096",
             "# columns: timestamp_us path offset pid tid comm cause dev ino",
             "# command: app"]
    t0 = 1_763_784_000_000_000
    for i in range(40):
        pid, tid = [(10, 10), (10, 11), (20, 20)][i % 3]
        lines.append(f"{t0 + i * 7} /data/a\\040b {i * PAGE} {pid} {tid} "
                     f"w{tid} sync_ra 8:1 5")
    lines.append("# end: pages=40 bytes=163840 files=1 duration_us=273 lost=0")
    trace = tmp_path / "threads.log"
    trace.write_text("\n".join(lines) + "\n")
    code, out, err = export(capsys, tmp_path, trace)
    assert code == 0, err
    timeline = Timeline(parse(out))
    check_against(trace.read_text(), timeline)
    assert len(timeline.slices) == 40
    assert {s[2] for s in timeline.slices} == {"/data/a b"}
    names = sorted(t.thread.thread_name for t in timeline.tracks.values()
                   if t.HasField("thread"))
    assert names == ["w10 10", "w11 11", "w20 20"]


def test_plain_trace_one_track(capsys, tmp_path):
    code, out, err = export(capsys, tmp_path, sample("basic.log"))
    assert code == 0, err
    timeline = Timeline(parse(out))
    check_against(open(sample("basic.log")).read(), timeline)
    assert not timeline.instants
    assert {s[4] for s in timeline.slices} == {
        next(u for u, t in timeline.tracks.items() if t.name.startswith(
            "pagetrace: "))}


def test_real_start_up(capsys, tmp_path):
    # firefox-esr's start, 103,551 pages: coverage exact at scale.
    trace = tmp_path / "ff.log"
    trace.write_bytes(lzma.open(sample("firefox-esr-startup.log.xz")).read())
    code, out, err = export(capsys, tmp_path, trace)
    assert code == 0, err
    check_against(trace.read_text(errors="surrogateescape"),
                  Timeline(parse(out)))


def test_empty_trace_is_a_valid_empty_timeline(capsys, tmp_path):
    trace = tmp_path / "empty.log"
    trace.write_text("# pagetrace-format: 2\n# page-size: 4096\n"
                     "# columns: timestamp_us path offset kind\n"
                     "# records: read access map\n# command: true\n")
    code, out, err = export(capsys, tmp_path, trace)
    assert code == 0 and err == ""
    parsed = parse(out)
    assert len(parsed.packet) >= 1
    assert not any(p.HasField("track_event") for p in parsed.packet)


@pytest.mark.parametrize("text, reason", [
    ("# pagetrace-format: 1\n100 /a 0\n100 /a 40", "truncated"),
    ("# pagetrace-format: 2\n# records: read\n"
     "# columns: timestamp_us path offset kind\n100 /a 0 read\n100 /a 1 rea\n",
     "bad.log:5: "),
    ("# pagetrace-format: 3\n100 /a 0\n", "unsupported trace format version"),
])
def test_unreadable_traces_one_line(capsys, tmp_path, text, reason):
    trace = tmp_path / "bad.log"
    trace.write_text(text)
    code, out, err = export(capsys, tmp_path, trace)
    assert code != 0
    assert len(err.splitlines()) == 1 and reason in err, err
    assert err.startswith("pagetrace: ")
    assert not out.exists()


def test_needs_an_output_file(capsys, tmp_path):
    code = cli.main(["export", sample("basic.log"), "--format", "perfetto"])
    err = capsys.readouterr().err
    assert code == 2 and err == "pagetrace: export: --format perfetto " \
        "needs -o FILE.pftrace\n"


def test_report_links_to_its_timeline(capsys, tmp_path):
    code = cli.main(["report", sample("used.log"), "-o", str(tmp_path)])
    capsys.readouterr()
    assert code == 0
    html = (tmp_path / "index.html").read_text()
    assert '<a href="timeline.pftrace">timeline.pftrace</a>' in html
    check_against(open(sample("used.log")).read(),
                  Timeline(parse(tmp_path / "timeline.pftrace")))


def test_without_the_perfetto_package_one_line(capsys, tmp_path, monkeypatch):
    # An installation without pagetrace[perfetto]: one line saying how to
    # get it, and no file; the report says so in its section instead.
    monkeypatch.setitem(sys.modules, "perfetto.protos.perfetto.trace", None)
    code, out, err = export(capsys, tmp_path, sample("basic.log"))
    assert code == 1 and not out.exists()
    assert err.startswith("pagetrace: export: --format perfetto needs the "
                          "perfetto package") and len(err.splitlines()) == 1
    assert "pip install 'pagetrace[perfetto]'" in err
    assert cli.main(["report", sample("basic.log"), "-o",
                     str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert not (tmp_path / "r" / "timeline.pftrace").exists()
    assert "No timeline: pagetrace export --format perfetto needs the " \
        "perfetto package" in (tmp_path / "r" / "index.html").read_text()

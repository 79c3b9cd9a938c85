"""Traces at scale (issue 12): the Parquet dataset, out-of-core summary and
the consensus of many runs.

Ground truth: the core reader (pagetrace.tracefile) for what a trace holds,
the in-memory analysis (pagetrace.metrics, pagetrace.waste) for what a
summary and the used pages are, and sets built by the test itself for the
consensus. The memory test caps a child process with a memory cgroup and
reads the cgroup's own high-water mark.
"""
import glob
import json
import os
import random
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from pagetrace import cli, consensus, dataset, merge, tracefile, waste
from pagetrace.scale import converter, request_stream, summary_pass
from pagetrace.scale import runs as dataset_runs
from pagetrace.scale import summary as scale_summary
from pagetrace import trace as pandas_reader

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(TOP, "samples")
CONFORMANCE = sorted(glob.glob(os.path.join(SAMPLES, "conformance", "*.log")))
SAMPLE_TRACES = [os.path.join(SAMPLES, n) for n in (
    "basic.log", "escaped.log", "malformed.log", "readpage-stp.log",
    "used.log", "firefox-esr-startup.log.xz")]


# --- the converter against the core reader ------------------------------------

def _records_of_dataset(part, header):
    names = converter._extra_names(header)
    rows = pq.read_table(part).to_pylist()

    def text(value):
        return None if value is None else value.decode("utf-8",
                                                       "surrogateescape")
    return [(r["line"], r["timestamp_us"], text(r["path"]), r["offset"],
             r["kind"], [text(r.get(n)) for n in names]) for r in rows]


def _records_of_core(trace, n_extra):
    return [(r.line, r.ts_us, r.path, r.offset, r.kind,
             (list(r.extras) + [None] * n_extra)[:n_extra])
            for r in trace.records]


def _assert_same_as_core(path, out_dir, block_bytes):
    try:
        expected = tracefile.read(path)
    except tracefile.TraceError as refused:
        with pytest.raises(tracefile.TraceError) as ours:
            dataset.convert_trace(path, str(out_dir), "r",
                                  block_bytes=block_bytes)
        assert str(ours.value) == str(refused)
        assert not os.listdir(out_dir), "a refused trace left files behind"
        return
    result = dataset.convert_trace(path, str(out_dir), "r",
                                   block_bytes=block_bytes)
    n_extra = len(converter._extra_names(expected.header))
    assert _records_of_dataset(result.path, expected.header) == \
        _records_of_core(expected, n_extra)
    assert result.malformed_lines == [line for line, _ in expected.malformed]
    assert result.malformed == expected.malformed[:dataset.WARN_LINES]
    assert result.trailer == expected.trailer
    meta = pq.ParquetFile(result.path).schema_arrow.metadata
    assert int(meta[b"page-size"]) == expected.header.page_size


@pytest.mark.unit
@pytest.mark.parametrize("block_bytes", [dataset.BLOCK_BYTES, 64, 7])
@pytest.mark.parametrize("path", CONFORMANCE + SAMPLE_TRACES[:-1],
                         ids=os.path.basename)
def test_convert_agrees_with_core_reader(path, block_bytes, tmp_path):
    """Same records, line numbers, malformed lines, reasons, trailer and
    refusals as the core reader, whatever the block size (7 bytes puts a
    block boundary inside nearly every line and header key)."""
    _assert_same_as_core(path, tmp_path, block_bytes)


@pytest.mark.unit
def test_convert_agrees_on_a_compressed_start_up_trace(tmp_path):
    _assert_same_as_core(SAMPLE_TRACES[-1], tmp_path, 1 << 16)


@pytest.mark.unit
def test_conformance_battery_is_there():
    assert len(CONFORMANCE) >= 20


def _mixed_trace(path, seed, version):
    """Well-formed records with every kind of bad line mixed in."""
    rng = random.Random(seed)
    good = ["{ts} /usr/lib/a.so {off}", "{ts} /data/my\\040file {off}",
            "{ts} //deleted/tmp/x {off}", "{ts} /é/ü {off}"]
    bad = ["{ts} /x", "{ts}  /x {off}", "{ts}\t/x {off}", " {ts} /x {off}",
           "{ts} /x {off} ", "0x10 /x {off}", "{ts} /x 4097",
           "{ts} /x\\9 {off}", "{ts} /x {off}\r", "", "# comment",
           "# end: pages=3 lost=0", "99999999999999999999 /x {off}",
           "18446744073709551615 /x {off}", "00000000000000000000001 /x 0",
           "²1 /x {off}", "-1 /x {off}", "{ts} /x -4096", "   "]
    kinds = ["read", "read", "read", "access", "map"]
    lines = ["# pagetrace-format: %d" % version, "# page-size: 4096"]
    if version == 2:
        lines += ["# columns: timestamp_us path offset kind comm",
                  "# records: read access"]
        bad += ["{ts} /x {off}", "{ts} /x {off} bogus c",
                "{ts} /x {off} map c", "{ts} /x {off} read c\\1"]
    for i in range(4000):
        template = rng.choice(bad) if rng.random() < 0.05 else \
            rng.choice(good)
        line = template.format(ts=1000 + i, off=4096 * rng.randrange(64))
        if version == 2 and template in good:
            line += f" {rng.choice(kinds[:4])} app\\040{i % 3}"
        lines.append(line)
    lines.append("# end: pages=1 bytes=2 files=3 duration_us=4 lost=5")
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


@pytest.mark.unit
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("block_bytes", [dataset.BLOCK_BYTES, 4096, 333])
def test_convert_agrees_on_a_mixed_trace(version, block_bytes, tmp_path):
    path = str(tmp_path / "mixed.log")
    _mixed_trace(path, seed=version, version=version)
    out = tmp_path / "out"
    out.mkdir()
    _assert_same_as_core(path, out, block_bytes)


def _well_formed_trace(path, n, version, seed, bad=(), truncated=False):
    """n records that arrow's typed path takes: escaped names (one also
    written plainly: \\101 is A), a device's metadata pages, in version 2
    every kind and an escaped extra column; `bad` maps a record's index to
    the line written instead; `truncated` cuts the last record short."""
    rng = random.Random(seed)
    names = ["/usr/lib/libc.so.6", "/data/my\\040file", "/x/\\101b",
             "/x/Ab", "/opt/\\377bin", "/dev/vda", "//deleted/tmp/x"]
    lines = [f"# pagetrace-format: {version}", "# page-size: 4096"]
    if version == 2:
        lines += ["# columns: timestamp_us path offset kind comm",
                  "# records: read access map"]
    for i in range(n):
        line = f"{1_000_000 + i // 3} {rng.choice(names)} " \
               f"{4096 * rng.randrange(500)}"
        if version == 2:
            line += f" {rng.choice(['read', 'read', 'access', 'map'])}" \
                    f" app\\040{i % 3}"
        lines.append(bad.get(i, line) if bad else line)
    text = "\n".join(lines) + "\n"
    if truncated:
        text = text[:-8]
    path.write_text(text)
    return str(path)


@pytest.fixture
def typed_blocks(monkeypatch):
    """The number of blocks the typed path took."""
    taken = [0]
    typed = converter._Converter._typed

    def counted(self, block, first_line):
        result = typed(self, block, first_line)
        taken[0] += result is not None
        return result
    monkeypatch.setattr(converter._Converter, "_typed", counted)
    return taken


@pytest.mark.unit
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("case", ["clean", "bad lines", "control bytes",
                                  "NUL byte", "truncated"])
def test_typed_path_agrees_with_core_reader(version, case, tmp_path, capsys,
                                            typed_blocks, summary_from):
    """Blocks of well-formed records go through arrow's typed parser; what
    it refuses in a block (a hexadecimal time or offset, which arrow would
    take, an offset off the page size, a bad escape, an empty field, an
    undeclared kind) is flagged by the reference checker with its line and
    reason, and a block that does not parse as columns (a comment, a
    short line) goes to the other paths: records, malformed lines and
    summary as the core reader and the in-memory analysis say. A tab, a
    carriage return (arrow ends a line there) or a NUL byte in the middle
    of a large trace are seen as the core reader sees them."""
    bad = {
        "control bytes": {2000: "5 /a\tb 0", 4000: "5 /a 0\r",
                          6000: "5 /a 0\r6 /b 4096", 7000: "5\t/a 0"},
        "NUL byte": {5000: "5 /a\0b 0"}}.get(case, {})
    if case == "bad lines":
        bad = {100: "0x10 /a 0", 700: "5 /a 0x1000", 1300: "5 /a 4097",
               1900: "5 /a\\9 0", 2500: "5  0", 3100: "# a comment",
               3700: "5 /a", 4300: "5 //unknown/8:1/12 0"}
        if version == 2:
            bad.update({4900: "5 /a 0 bogus x", 5500: "5 /a 0 read x\\",
                        6100: "5 /a 0 r\\145ad x"})
    path = _well_formed_trace(tmp_path / "t.log", 8000, version, seed=1,
                              bad=bad, truncated=case == "truncated")
    out = tmp_path / "out"
    out.mkdir()
    _assert_same_as_core(path, out, 4096)
    assert typed_blocks[0] > 10
    if case == "NUL byte":
        return
    memory, memory_err = _summary(["--engine", "memory", "--json", path],
                                  capsys)
    assert _summary(["--engine", "duckdb", "--json", path], capsys) == \
        (memory, memory_err)


@pytest.mark.unit
def test_summary_pass_gives_up_or_is_not_for_this_file(tmp_path, capsys,
                                                       monkeypatch):
    """The conversion's summary is used only for the file it was written
    for: a part file rewritten by another tool (rows dropped), or a
    _summary.json that is not JSON, leave the summary to DuckDB, which
    reads the file as it is; past PAGE_MAP_BYTES the pass gives up and
    writes none."""
    path = _well_formed_trace(tmp_path / "t.log", 5000, 2, seed=2)
    ds = tmp_path / "ds"
    assert cli.main(["convert", "-q", "-o", str(ds), path]) == 0
    run = ds / "run=t"
    assert (run / dataset.SUMMARY_NAME).exists()
    full, _ = _summary(["--json", str(run)], capsys)
    part = run / "part-0.parquet"
    table = pq.read_table(part)
    pq.write_table(table.slice(0, 4000), part)
    text = tmp_path / "first4000.log"
    text.write_text("".join(line for line in open(path).readlines()[:4004]))
    expected = json.loads(_summary(["--engine", "memory", "--json",
                                    str(text)], capsys)[0])
    got = json.loads(_summary(["--json", str(run)], capsys)[0])
    assert got["totals"] != json.loads(full)["totals"]
    for key in ("trace", "malformed_lines", "trailer"):
        got.pop(key), expected.pop(key)
    assert got == expected
    (run / dataset.SUMMARY_NAME).write_text("{not json")
    assert json.loads(_summary(["--json", str(run)], capsys)[0])["totals"] \
        == got["totals"]
    # Rows of the wrong shape beside the right file: not used either.
    assert cli.main(["convert", "-q", "-o", str(tmp_path / "ds3"), path]) == 0
    known = tmp_path / "ds3" / "run=t" / dataset.SUMMARY_NAME
    for rows in ([["/a", 1, 1, 1, 1]], [["/a", 1, 1, 1, 1, -1]],
                 [["\u0100", 1, 1, 1, 1, 1]], "x"):
        changed = json.loads(known.read_text())
        changed["files"] = rows
        known.write_text(json.dumps(changed))
        assert _summary(["--json", str(known.parent)], capsys)[0] \
            .replace("ds3", "ds") == full
    monkeypatch.setattr(summary_pass, "PAGE_MAP_BYTES", 1 << 10)
    assert cli.main(["convert", "-q", "-o", str(tmp_path / "ds2"), path]) == 0
    assert not (tmp_path / "ds2" / "run=t" / dataset.SUMMARY_NAME).exists()
    assert _summary(["--json", str(tmp_path / "ds2" / "run=t")], capsys)[0] \
        .replace("ds2", "ds") == full


@pytest.mark.unit
@pytest.mark.parametrize("page_size, offsets, kept", [
    (1 << 30, [0, 1 << 30, 9 << 30, 5 << 30], True),
    (1 << 30, [0, 1 << 30, 1 << 62], False),
    (4096, [0, 4096, 1 << 60, 1 << 52, 8192], False)],
    ids=["1 GiB pages", "wide", "far"])
def test_summary_pass_of_large_offsets(page_size, offsets, kept, tmp_path,
                                       capsys):
    """The largest page size the format allows is counted like any other;
    a file spanning more pages than PAGE_MAP_BYTES, or pages past 2^40,
    make the pass give up (no _summary.json) and the summary is DuckDB's:
    the same summary as in memory either way."""
    lines = ["# pagetrace-format: 1", f"# page-size: {page_size}"]
    lines += [f"{100 + i} /f{i % 2} {offset}" for i, offset in
              enumerate(offsets * 3)]
    path = tmp_path / "t.log"
    path.write_text("\n".join(lines) + "\n")
    assert cli.main(["convert", "-q", "-o", str(tmp_path / "ds"),
                     str(path)]) == 0
    assert (tmp_path / "ds" / "run=t" / dataset.SUMMARY_NAME).exists() == \
        kept
    memory = json.loads(_summary(["--engine", "memory", "--json",
                                  str(path)], capsys)[0])
    got = json.loads(_summary(["--json", str(tmp_path / "ds" / "run=t")],
                              capsys)[0])
    for key in ("trace", "malformed_lines", "trailer"):
        got.pop(key), memory.pop(key)
    assert got == memory


@pytest.mark.unit
def test_convert_cli_layout_and_refusal(tmp_path, capsys):
    """One partition per run; a refused trace is named, the others go on,
    and the exit status says that one failed."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    code = cli.main(["convert", "-q", "-o", str(tmp_path / "ds"),
                     os.path.join(SAMPLES, "basic.log"), str(empty),
                     os.path.join(SAMPLES, "used.log")])
    err = capsys.readouterr().err
    assert code == 1
    assert f"pagetrace: {empty}: empty file\n" in err
    assert sorted(os.listdir(tmp_path / "ds")) == ["run=basic", "run=used"]


# --- summary: text and Parquet, in memory and out of core --------------------

@pytest.fixture(params=["pass", "duckdb"])
def summary_from(request, monkeypatch):
    """Where the out-of-core summary comes from: the conversion's own pass
    (_summary.json; DuckDB's queries fail here, so it must), or DuckDB
    (the pass's file is ignored)."""
    if request.param == "pass":
        def refuse(*args, **kwargs):
            raise AssertionError("summary asked DuckDB; the pass had it")
        monkeypatch.setattr(scale_summary, "per_file_rows", refuse)
        monkeypatch.setattr(request_stream, "trace_order", refuse)
    else:
        monkeypatch.setattr(scale_summary, "known_summary", lambda *args: None)
    return request.param


def _summary(argv, capsys):
    assert cli.main(["summary", *argv]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.mark.unit
@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=os.path.basename)
def test_summary_same_in_memory_text_and_parquet(path, tmp_path, capsys,
                                                 summary_from):
    """summary --json and the text table: the in-memory reader, DuckDB on
    the text trace and DuckDB on its Parquet dataset say the same (Parquet
    keeps no malformed lines or trailer: those keys are null there)."""
    memory, memory_err = _summary(["--engine", "memory", "--json", path],
                                  capsys)
    text, text_err = _summary(["--engine", "duckdb", "--json", path], capsys)
    assert text == memory
    assert text_err == memory_err
    assert cli.main(["convert", "-q", "-o", str(tmp_path / "ds"),
                     "--run", "one", path]) == 0
    capsys.readouterr()
    run_dir = str(tmp_path / "ds" / "run=one")
    parquet, _ = _summary(["--json", run_dir], capsys)   # auto: DuckDB
    expected = json.loads(memory)
    got = json.loads(parquet)
    assert got.pop("malformed_lines") is None and got.pop("trailer") is None
    assert got.pop("trace") == run_dir
    for key in ("malformed_lines", "trailer", "trace"):
        expected.pop(key)
    assert got == expected
    assert _summary(["--engine", "duckdb", path], capsys)[0] == \
        _summary(["--engine", "memory", path], capsys)[0]


@pytest.mark.unit
def test_summary_requests_across_batches(tmp_path, summary_from):
    """Requests and seeks follow trace order across Parquet batches: a run
    of adjacent pages that crosses a batch boundary is one request (split
    only at max_request_bytes), as metrics.group_requests counts it."""
    from pagetrace import metrics
    from pagetrace.synth import write_synthetic_trace
    path = str(tmp_path / "synth.log")
    write_synthetic_trace(path, 1_500_000, n_files=40, seed=3)
    runs = dataset.Runs([path], str(tmp_path), print, summarise=True)
    con = dataset.connect(str(tmp_path))
    ours = dataset.summary(con, runs)
    frame = pandas_reader.read_trace(path)
    seeks = metrics.trace_seek_report(frame)["original"]
    assert (ours["requests"], ours["seeks"]) == (seeks["requests"],
                                                 seeks["seeks"])
    assert ours["totals"] == metrics.totals(frame)


# --- consensus ----------------------------------------------------------------

def _write_run(path, pages, version=1, accessed=(), page_size=4096):
    """A trace of `pages` read in that order, then `accessed` (version 2)."""
    lines = [f"# pagetrace-format: {version}", f"# page-size: {page_size}"]
    if version == 2:
        lines += ["# columns: timestamp_us path offset kind",
                  "# records: read access map"]
    for i, (name, offset) in enumerate(pages):
        lines.append(f"{1000 + 10 * i} {name} {offset}"
                     + (" read" if version == 2 else ""))
    for i, (name, offset) in enumerate(accessed):
        lines.append(f"{100000 + i} {name} {offset} access")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _core_and_noise(tmp_path, n_runs, seed=7):
    """Runs that share a core (in the same order in every run) plus pages
    of their own, interleaved at random."""
    rng = random.Random(seed)
    core = [(f"/lib/core{i % 5}.so", 4096 * (i // 5)) for i in range(120)]
    paths = []
    for run in range(n_runs):
        noise = [(f"/var/run{run}/n{j % 4}", 4096 * j) for j in range(60)]
        # Some pages shared by a few runs only: never by all.
        noise += [("/shared/few", 4096 * j) for j in range(3 * run,
                                                         3 * run + 10)]
        pages = list(core)
        for page in noise:
            pages.insert(rng.randrange(len(pages) + 1), page)
        paths.append(_write_run(tmp_path / f"run{run}.log", pages))
    return core, paths


def _shared(runs, k):
    """The /shared/few pages of _core_and_noise in at least k of `runs`."""
    return {("/shared/few", 4096 * j) for j in range(3 * max(runs) + 10)
            if len([r for r in runs if 3 * r <= j < 3 * r + 10]) >= k}


def _trace_pages(path):
    trace = tracefile.read(path)
    return [(r.path, r.offset) for r in trace.records]


@pytest.mark.unit
def test_consensus_is_exactly_the_core(tmp_path, capsys):
    core, paths = _core_and_noise(tmp_path, 5)
    out = tmp_path / "consensus.log"
    assert cli.main(["merge", "--min-runs", "5", "-o", str(out),
                     "--stability", str(tmp_path / "st.json"), *paths]) == 0
    # In the core's order: each run has it in that order, so the median
    # ranks keep it.
    assert _trace_pages(str(out)) == core
    report = json.loads((tmp_path / "st.json").read_text())
    assert report["runs"] == 5 and report["consensus_pages"] == 120
    assert report["pages_in_all_runs"] == 120
    # 5 runs x 60 own pages + /shared/few pages 0..21.
    assert report["pages"] == 120 + 5 * 60 + 22
    varying = {f["path"] for f in report["files_that_vary"]}
    assert "/shared/few" in varying and "/lib/core0.so" not in varying
    err = capsys.readouterr().err
    assert "in all runs: 120" in err


@pytest.mark.unit
def test_consensus_min_fraction_and_parquet_input(tmp_path, capsys):
    core, paths = _core_and_noise(tmp_path, 5)
    assert cli.main(["convert", "-q", "-o", str(tmp_path / "ds"),
                     *paths]) == 0
    out = tmp_path / "c.log"
    # 0.5 of 5 runs: at least 3. /shared/few page j is in the runs r
    # with 3r <= j < 3r + 10.
    assert cli.main(["merge", "--min-fraction", "0.5", "-o", str(out),
                     str(tmp_path / "ds")]) == 0
    shared = _shared(range(5), 3)
    assert shared
    assert set(_trace_pages(str(out))) == set(core) | shared
    # Every page line carries runs, stability and rank.
    body = [l for l in out.read_text().splitlines() if not l.startswith("#")]
    fields = body[0].split()
    assert fields[3] == "5" and fields[4] == "1.000" and float(fields[5]) >= 0


def test_replay_prefetches_exactly_the_consensus(tmp_path, capsys):
    """The consensus trace drives the real replay: `replay --prefetch`
    brings exactly the pages in at least K runs into the page cache
    (mincore and cachestat, tests/pagecache_util.py), none of the others."""
    import loopimg
    loopimg.require_root()
    replay = os.path.join(TOP, "replay", "replay")
    if not os.access(replay, os.X_OK):
        subprocess.run(["make", "-C", os.path.join(TOP, "replay")],
                       check=True, capture_output=True)
    rng = random.Random(17)
    with loopimg.loop_mount("ext4", 64, ("-q", "-F", "-b", "4096")) as (
            mnt, _):
        files = [os.path.join(mnt, f"f{i}") for i in range(3)]
        for i, path in enumerate(files):
            loopimg.write_file(path, 64 * 4096, seed=i)
        every = [(path, 4096 * n) for path in files for n in range(64)]
        core = rng.sample(every, 40)
        rest = [page for page in every if page not in core]
        paths = []
        for run in range(5):
            # Pages of their own, and a few that 3 runs share (K = 4
            # leaves them out).
            pages = core + rng.sample(rest[:80], 10) + rest[80 + run:83 + run]
            rng.shuffle(pages)
            paths.append(_write_run(tmp_path / f"run{run}.log", pages))
        out = tmp_path / "consensus.log"
        assert cli.main(["merge", "--min-runs", "4", "-o", str(out),
                         *paths]) == 0
        chosen = set(_trace_pages(str(out)))
        assert core and set(core) <= chosen
        for path in files:
            loopimg.evict(path)
        done = subprocess.run([replay, "--prefetch", "--json", str(out)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["mode"] == "prefetch"
        resident = {(path, offset) for path in files
                    for offset in loopimg.resident_pages(path)}
        assert resident == chosen


@pytest.mark.unit
def test_used_consensus_uses_the_waste_definition(tmp_path, capsys):
    """Used = read and accessed in the same run (pagetrace.waste): pages
    only read, or accessed without a read, are not in it."""
    rng = random.Random(3)
    core = [("/lib/u.so", 4096 * i) for i in range(40)]
    paths = []
    for run in range(4):
        only_read = [("/lib/r.so", 4096 * i) for i in range(30)]
        cached = [("/lib/c.so", 4096 * i) for i in range(10)]
        extra_used = [(f"/run{run}.dat", 4096 * i) for i in range(5)]
        reads = core + only_read + extra_used
        rng.shuffle(reads)
        accessed = core + cached + extra_used
        paths.append(_write_run(tmp_path / f"u{run}.log", reads, version=2,
                                accessed=accessed))
    for path in paths:
        usage = waste.page_usage(pandas_reader.read_trace(path))
        expected = {(str(p), int(o)) for p, o, u in zip(
            usage["path"], usage["offset"], usage["used"]) if u}
        runs = dataset.Runs([path], str(tmp_path / "w"), print)
        con = dataset.connect(str(tmp_path / "w"))
        consensus.build(con, runs, used=True)
        got = {(bytes(p).decode(), o) for p, o in con.execute(
            'SELECT path, "offset" FROM pages').fetchall()}
        assert got == expected
    out = tmp_path / "used.log"
    assert cli.main(["merge", "--used", "--min-runs", "4", "-o", str(out),
                     *paths]) == 0
    assert set(_trace_pages(str(out))) == set(core)


@pytest.mark.unit
def test_required_runs():
    assert consensus.required_runs(10, min_fraction=0.7) == 7
    assert consensus.required_runs(10, min_fraction=0.71) == 8
    assert consensus.required_runs(3) == 3
    assert consensus.required_runs(3, min_runs=2) == 2


# --- bad input ----------------------------------------------------------------

@pytest.mark.unit
def test_truncated_parquet_and_corrupt_run_are_named(tmp_path, capsys):
    core, paths = _core_and_noise(tmp_path, 4)
    ds = tmp_path / "ds"
    assert cli.main(["convert", "-q", "-o", str(ds), *paths]) == 0
    part = ds / "run=run2" / "part-0.parquet"
    data = part.read_bytes()
    part.write_bytes(data[:len(data) // 2])
    garbage = ds / "run=run3" / "part-0.parquet"
    garbage.write_bytes(b"not parquet at all\n")
    out = tmp_path / "c.log"
    code = cli.main(["merge", "--min-runs", "2", "-o", str(out), str(ds)])
    err = capsys.readouterr().err
    assert code == 0
    assert f"pagetrace: {part}: not a readable Parquet file (truncated or " \
        "corrupt)" in err
    assert f"pagetrace: {garbage}: not a readable Parquet file" in err
    assert "runs: 2;" in err
    assert set(_trace_pages(str(out))) == set(core) | _shared([0, 1], 2)
    # The truncated file alone: the whole job fails, with the name.
    code = cli.main(["summary", str(part)])
    err = capsys.readouterr().err
    assert code == 1 and str(part) in err and "Traceback" not in err


@pytest.mark.unit
def test_runs_with_another_page_size_are_left_out(tmp_path, capsys):
    core, paths = _core_and_noise(tmp_path, 3)
    odd = tmp_path / "odd.log"
    odd.write_text("# pagetrace-format: 1\n# page-size: 16384\n"
                   "1 /lib/core0.so 0\n")
    out = tmp_path / "c.log"
    assert cli.main(["merge", "--min-runs", "3", "-o", str(out), *paths,
                     str(odd)]) == 0
    err = capsys.readouterr().err
    assert f"pagetrace: {odd}: page-size 16384 differs from 4096 of the " \
        "runs before it; run 'odd' left out" in err
    assert set(_trace_pages(str(out))) == set(core) | _shared([0, 1, 2], 3)


@pytest.mark.unit
def test_no_usable_run_fails(tmp_path, capsys):
    bad = tmp_path / "bad.log"
    bad.write_bytes(b"# pagetrace-format: 9\n1 /a 0\n")
    assert cli.main(["merge", "--min-runs", "1", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"pagetrace: {bad}: unsupported trace format version '9'" in err
    assert "pagetrace: merge: no usable run" in err


# --- bounded memory -------------------------------------------------------------

def _memory_cgroup():
    """A child of this process's memory cgroup (v1 or v2), or None."""
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.strip().split(":", 2)
        if "memory" in controllers.split(","):
            return f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes", \
                "memory.max_usage_in_bytes"
        if controllers == "" and os.path.exists(
                "/sys/fs/cgroup/cgroup.controllers"):
            return f"/sys/fs/cgroup{path}", "memory.max", "memory.peak"
    return None


def test_trace_larger_than_the_memory_cap(tmp_path):
    """convert and summary of a 460 MiB trace (8.5 M records) in a memory
    cgroup capped at 384 MiB, the summary from the conversion's pass and
    then from DuckDB (the pass's file removed): all finish, the two
    summaries are the same, and the cgroup's own high-water mark stays
    under the cap (the in-memory reader needs about 1.5 GiB for it,
    docs/benchmarks.md)."""
    from pagetrace.synth import write_synthetic_trace
    found = _memory_cgroup()
    assert found, "no memory cgroup on this machine"
    parent, limit_file, peak_file = found
    cap = 384 << 20
    trace = str(tmp_path / "big.log")
    write_synthetic_trace(trace, 8_500_000, seed=5)
    assert os.path.getsize(trace) > cap
    group = os.path.join(parent, f"pagetrace-scale-test-{os.getpid()}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, limit_file), "w") as f:
            f.write(str(cap))
        summary = (f"{sys.executable} -m pagetrace.cli summary --json "
                   f"--memory-limit 128MB --work-dir {tmp_path} "
                   f"{tmp_path}/ds/run=big")
        script = (f"echo $$ > {group}/cgroup.procs && "
                  f"{sys.executable} -m pagetrace.cli convert -q -o "
                  f"{tmp_path}/ds {trace} && {summary} && "
                  f"rm {tmp_path}/ds/run=big/{dataset.SUMMARY_NAME} && "
                  f"{summary}")
        done = subprocess.run(["sh", "-c", script], capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        passed, duckdb = done.stdout.split("\n}\n", 1)
        assert json.loads(passed + "}") == json.loads(duckdb)
        assert json.loads(duckdb)["totals"]["pages"] == 8_500_000
        with open(os.path.join(group, peak_file)) as f:
            peak = int(f.read())
        assert 0 < peak <= cap
    finally:
        os.rmdir(group)


# --- arrow's CSV reader ---------------------------------------------------------

@pytest.mark.unit
def test_fast_path_survives_empty_and_failing_blocks(tmp_path):
    """The fast path never hands arrow's threaded CSV reader a block it
    fails on (apache/arrow#38676: a failing threaded read leaves a task
    behind that aborts the interpreter at exit): an empty block and a block
    that is not columns are left to the reference checker, in a child
    process that must exit cleanly; and a trace that is all header, or
    header and blank lines, converts to no records."""
    script = (
        "import sys\n"
        "from pagetrace import tracefile\n"
        "from pagetrace.scale import converter\n"
        "header = tracefile.read_header(b'# pagetrace-format: 1\\n"
        "# page-size: 4096\\n1 /a 0\\n', 'x')\n"
        f"c = converter._Converter(header, {str(tmp_path / 'p.parquet')!r}, "
        "'r')\n"
        "assert c._fast(b'', 3) is None\n"
        "bad = b'1 /a 0 surplus\\n' + b'12345 /usr/lib/libfoo.so 4096\\n'"
        " * 1500000\n"
        "assert c._fast(bad, 3) is None\n"
        "c.close()\n")
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    for name, text in (("header.log", "# pagetrace-format: 1\n"
                        "# page-size: 4096\n"),
                       ("blank.log", "# pagetrace-format: 1\n\n\n")):
        path = tmp_path / name
        path.write_text(text)
        result = dataset.convert_trace(str(path), str(tmp_path / "ds"))
        assert result.records == 0 and result.n_malformed == 0
        assert pq.read_table(result.path).num_rows == 0


# --- the other verbs: in memory and out of core say the same -------------------

def _run_verb(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _both_engines(argv, capsys, inputs):
    """(memory, duckdb) results of `pagetrace ARGV INPUTS`."""
    return [_run_verb([argv[0], "--engine", engine, *argv[1:], *inputs],
                      capsys) for engine in ("memory", "duckdb")]


def _json_close(a, b):
    """Equal, floats to 1e-9 relative (the models' sums are added up in
    another order out of core)."""
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_json_close(a[k], b[k])
                                            for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_json_close, a, b))
    return a == b


def _cause_trace(path, n, seed):
    """A version 2 trace with a cause column (short records too: a missing
    cause), metadata reads of /dev/vda, pages read twice, accessed,
    mapped, and accessed without a read."""
    rng = random.Random(seed)
    causes = ["fault", "sync_ra", "async_ra", "read"]
    lines = ["# pagetrace-format: 2", "# page-size: 4096",
             "# columns: timestamp_us path offset kind cause",
             "# records: read access map"]
    for i in range(n):
        name = rng.choice(["/usr/lib/a.so", "/usr/lib/b\\040c.so",
                           "/opt/x/\\377bin", "/dev/vda", "/etc/ld.so.cache"])
        offset = 4096 * rng.randrange(300)
        kind = rng.choice(["read", "read", "read", "access", "map"])
        cause = "" if rng.random() < 0.1 else " " + (
            "metadata" if name == "/dev/vda" else rng.choice(causes))
        lines.append(f"{1000 + i} {name} {offset} {kind}"
                     + (cause if kind == "read" else ""))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


VERBS = [["seeks"], ["seeks", "--json"], ["waste"], ["waste", "--json"],
         ["waste", "--top", "2"]]


@pytest.mark.unit
@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=os.path.basename)
def test_verbs_same_in_memory_and_out_of_core(verb, path, capsys):
    memory, duckdb = _both_engines(verb, capsys, [path])
    assert duckdb[0] == memory[0]
    assert duckdb[2] == memory[2]
    if "--json" in verb and memory[0] == 0:
        assert _json_close(json.loads(duckdb[1]), json.loads(memory[1]))
    else:
        assert duckdb[1] == memory[1]


@pytest.mark.unit
@pytest.mark.parametrize("other", SAMPLE_TRACES, ids=os.path.basename)
def test_diff_and_union_same_in_memory_and_out_of_core(other, capsys):
    for first in SAMPLE_TRACES[:2]:
        for verb in (["diff"], ["merge"]):
            memory, duckdb = _both_engines(verb, capsys, [first, other])
            assert duckdb == memory


@pytest.mark.unit
@pytest.mark.parametrize("key", ["hash({column})",
                                 "octet_length({column}) % 2"],
                         ids=["hash", "colliding"])
def test_verbs_on_a_larger_trace_and_its_parquet(tmp_path, capsys,
                                                 monkeypatch, key):
    """Several row groups and sort batches (made small here), causes,
    metadata, non-UTF-8 names: the same out of core, from text and from
    Parquet; and the same when paths share a key (forced here), so that
    the queries group by the paths' bytes."""
    from pagetrace import outofcore
    monkeypatch.setattr(outofcore, "SORT_BATCH_ROWS", 1000)
    monkeypatch.setattr(dataset_runs, "PATH_KEY", key)
    a = _cause_trace(tmp_path / "a.log", 60_000, seed=1)
    b = _cause_trace(tmp_path / "b.log", 20_000, seed=2)
    ds = tmp_path / "ds"
    assert cli.main(["convert", "-q", "-o", str(ds), a, b]) == 0
    parquet = [str(ds / "run=a"), str(ds / "run=b" / "part-0.parquet")]
    for verb in (["seeks", "--json"], ["waste", "--json"]):
        memory, duckdb = _both_engines(verb, capsys, [a])
        assert memory[0] == duckdb[0] == 0 and memory[2] == duckdb[2]
        from_parquet = _run_verb([*verb, parquet[0]], capsys)
        for got in (duckdb, from_parquet):
            ours, theirs = json.loads(got[1]), json.loads(memory[1])
            for answer in (ours, theirs):
                if isinstance(answer, dict):
                    answer.pop("trace")   # the input's name
            assert _json_close(ours, theirs)
    # diff's table itself (its text: test_names_that_are_not_utf8_...).
    expected = merge.diff_traces(pandas_reader.read_trace(a),
                                 pandas_reader.read_trace(b))
    for inputs in ([a, b], parquet):
        runs = [dataset.Runs([i], str(tmp_path / f"w{n}"), print)
                for n, i in enumerate(inputs)]
        got = outofcore.diff_table(dataset.connect(str(tmp_path)), *runs)
        assert got.equals(expected)
    out = [tmp_path / f"{e}.log" for e in ("memory", "duckdb")]
    for engine, path in zip(("memory", "duckdb"), out):
        assert cli.main(["merge", "--engine", engine, "-o", str(path), a, b,
                         a]) == 0
    assert out[0].read_bytes() == out[1].read_bytes()


@pytest.mark.unit
def test_plot_frame_is_the_trace_or_every_kth_read(tmp_path):
    """At most max_points reads: read_trace's frame itself. More: every
    k-th read in trace order, and with mark_unused the pages ringed are
    exactly those of the sample that the whole run never accessed."""
    from pagetrace import outofcore, plots
    path = _cause_trace(tmp_path / "a.log", 5_000, seed=3)
    full = pandas_reader.read_trace(path)
    columns = ["ts_us", "path", "offset", "kind", "cause"]

    def rows(frame):
        return [tuple(str(v) for v in r) for r in
                frame[columns].itertuples(index=False)]
    runs = dataset.Runs([path], str(tmp_path / "w"), print)
    con = dataset.connect(str(tmp_path / "w"))
    frame, note = outofcore.plot_frame(con, runs)
    assert note == "" and rows(frame) == rows(full)
    assert frame.attrs["page_size"] == 4096
    reads = full[full["kind"] == "read"]
    frame, note = outofcore.plot_frame(con, runs, mark_unused=True,
                                       max_points=1000)
    step = -(-len(reads) // 1000)
    assert f"every {step:,}th of {len(reads):,} reads" in note
    sample = frame[frame["kind"] == "read"]
    assert rows(sample) == rows(reads.iloc[::step])
    never = set(zip(*[waste.page_usage(full).query("not used")[c].astype(
        str) for c in ("path", "offset")]))
    ringed = plots.unused_reads(frame)
    assert [(str(p), str(o)) in never for p, o in zip(
        sample["path"], sample["offset"])] == list(ringed)


@pytest.mark.unit
def test_plot_out_of_core_writes_the_figures(tmp_path, capsys):
    path = os.path.join(SAMPLES, "used.log")
    stem = str(tmp_path / "fig")
    assert cli.main(["plot", "--engine", "duckdb", "--waterfall", "--zoom",
                     "--mark-unused", "-o", stem, path]) == 0
    written = capsys.readouterr().out.split()
    assert written == [f"{stem}{s}.{e}" for s in ("", "-waterfall", "-zoom")
                       for e in ("png", "svg")]
    assert all(os.path.getsize(p) > 1000 for p in written)


@pytest.mark.unit
def test_auto_engine(tmp_path, monkeypatch):
    """auto: DuckDB for Parquet input and text over the threshold, in
    total; the in-memory reader below it."""
    import argparse
    args = argparse.Namespace(engine="auto")
    small = os.path.join(SAMPLES, "basic.log")
    assert not cli.use_out_of_core(args, small)
    assert cli.use_out_of_core(args, str(tmp_path))
    assert cli.use_out_of_core(args, "x/part-0.parquet")
    size = os.path.getsize(small)
    monkeypatch.setattr(cli, "OUT_OF_CORE_TEXT_BYTES", size)
    assert not cli.use_out_of_core(args, small)
    assert cli.use_out_of_core(args, small, small)
    assert not cli.use_out_of_core(argparse.Namespace(engine="memory"),
                                       small, small)
    # A compressed trace counts as COMPRESSION_RATIO times its size.
    packed = tmp_path / "t.log.xz"
    packed.write_bytes(b"x" * (size // cli.COMPRESSION_RATIO + 1))
    assert cli.use_out_of_core(args, str(packed))


@pytest.mark.unit
@pytest.mark.parametrize("used", [False, True], ids=["read", "used"])
def test_consensus_in_batches_and_buckets_is_the_same(tmp_path, monkeypatch,
                                                      capsys, used):
    """Past BATCH_RECORDS the runs are ranked a batch at a time and the
    medians taken a bucket of pages at a time: the same trace and report
    as the one query (forced here with batches of about one run)."""
    rng = random.Random(5)
    core = [(f"/lib/c{i % 3}.so", 4096 * i) for i in range(200)]
    paths = []
    for run in range(7):
        pages = core + [(f"/r{run}", 4096 * j) for j in range(30)] + \
            [("/few", 4096 * j) for j in range(run, run + 20)]
        rng.shuffle(pages)
        accessed = [p for p in pages if rng.random() < 0.6] if used else ()
        paths.append(_write_run(tmp_path / f"r{run}.log", pages,
                                version=2 if used else 1, accessed=accessed))
    ds = tmp_path / "ds"
    assert cli.main(["convert", "-q", "-o", str(ds), *paths]) == 0
    flags = ["--used"] if used else []
    outputs = []
    for batch in (None, 300):
        if batch:
            monkeypatch.setattr(consensus, "BATCH_RECORDS", batch)
            monkeypatch.setattr(consensus, "BUCKET_RECORDS", 250)
            assert len(consensus._batches(dataset.Runs(
                [str(ds)], str(tmp_path), print))) == 7
        out, st = tmp_path / f"{batch}.log", tmp_path / f"{batch}.json"
        assert cli.main(["merge", *flags, "--min-runs", "3", "-o", str(out),
                         "--stability", str(st), str(ds)]) == 0
        outputs.append((out.read_bytes(), st.read_bytes(),
                        capsys.readouterr().err))
    assert outputs[0] == outputs[1]
    assert len(outputs[0][0].splitlines()) > 200


@pytest.mark.unit
@pytest.mark.parametrize("verb", ["summary", "waste", "seeks", "plot",
                                  "diff"])
def test_verbs_name_a_truncated_parquet_file(verb, tmp_path, capsys):
    """A truncated part file: one line naming the file and why, exit status
    1, no traceback. A directory of two good runs: refused by the verbs
    that take one. A directory of a truncated run and a good one: the
    truncated one named, the good one analysed."""
    ds = tmp_path / "ds"
    assert cli.main(["convert", "-q", "-o", str(ds),
                     os.path.join(SAMPLES, "used.log"),
                     os.path.join(SAMPLES, "basic.log")]) == 0
    options = {"plot": ["-o", str(tmp_path / "fig")],
               "diff": [os.path.join(SAMPLES, "basic.log")]}.get(verb, [])
    code, out, err = _run_verb([verb, str(ds), *options], capsys)
    assert code == 1 and "takes one run" in err
    part = ds / "run=used" / "part-0.parquet"
    part.write_bytes(part.read_bytes()[:300])
    code, out, err = _run_verb([verb, str(part), *options], capsys)
    assert code == 1 and out == ""
    assert err.startswith(f"pagetrace: {part}: not a readable Parquet file "
                          "(truncated or corrupt): ")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    code, out, err = _run_verb([verb, str(ds), *options], capsys)
    assert f"pagetrace: {part}: not a readable Parquet file" in err
    if verb == "waste":   # basic.log has no access records
        assert code == 1 and "no access records" in err
    else:
        assert code == 0 and out


@pytest.mark.unit
def test_plain_merge_of_a_dataset_is_the_union(tmp_path, capsys):
    """Without --min-runs, --min-fraction or --used, merge is the union
    (merge.merge_traces) for Parquet runs as for text traces."""
    core, paths = _core_and_noise(tmp_path, 3)
    ds = tmp_path / "ds"
    assert cli.main(["convert", "-q", "-o", str(ds), *paths]) == 0
    outputs = []
    for inputs in (paths, [str(ds)]):
        out = tmp_path / "union.log"
        assert cli.main(["merge", "--engine", "memory" if inputs == paths
                         else "auto", "-o", str(out), *inputs]) == 0
        outputs.append(([line for line in out.read_text().splitlines()
                         if not line.startswith("# command: ")],
                        capsys.readouterr().err))
    assert outputs[0] == outputs[1]
    # 4 header lines, core, own pages, /shared/few 0..15, trailer.
    assert len(outputs[0][0]) == 4 + 120 + 3 * 60 + 16 + 1


@pytest.mark.unit
def test_engine_failures_are_one_line(tmp_path, capsys):
    """A bad --memory-limit, and DuckDB running out of the memory it is
    given, are one line and exit status 1, for the verbs and merge."""
    path = os.path.join(SAMPLES, "basic.log")
    for argv in (["summary", "--engine", "duckdb"], ["seeks", "--engine",
                                                     "duckdb"],
                 ["merge", "--min-runs", "1"]):
        code, _, err = _run_verb([*argv, "--memory-limit", "lots", path],
                                 capsys)
        assert (code, err) == (1, "pagetrace: --memory-limit lots: Parser "
                               "Error: Memory must have a number (e.g. 1GB)\n")
    big = str(tmp_path / "big.log")
    from pagetrace.synth import write_synthetic_trace
    write_synthetic_trace(big, 200_000, seed=4)
    # The summary of a run without the conversion's own summary (removed
    # here) is DuckDB's; that of a text trace comes with its conversion.
    assert cli.main(["convert", "-q", "-o", str(tmp_path / "ds"), big]) == 0
    os.unlink(tmp_path / "ds" / "run=big" / dataset.SUMMARY_NAME)
    for argv in (["summary", str(tmp_path / "ds" / "run=big")],
                 ["seeks", "--engine", "duckdb", big]):
        code, out, err = _run_verb([argv[0], "--memory-limit", "1MB",
                                    "--work-dir", str(tmp_path),
                                    *argv[1:]], capsys)
        assert code == 1 and out == "" and len(err.splitlines()) == 1
        assert err.startswith("pagetrace: DuckDB ran out of memory: ")
        assert err.endswith("; give it more with --memory-limit\n")


@pytest.mark.unit
@pytest.mark.parametrize("key", ["hash({column})", "octet_length({column})"],
                         ids=["hash", "colliding"])
def test_summary_distinct_pages_by_path_key(key, tmp_path, capsys,
                                            monkeypatch):
    """Distinct pages are grouped by the path's hash; when two paths of a
    trace share a key (forced here: paths of the same length), the query
    runs again on the bytes, and the summary stays the in-memory one (the
    conversion's own summary is ignored here, so that DuckDB computes
    it)."""
    monkeypatch.setattr(scale_summary, "known_summary", lambda *args: None)
    monkeypatch.setattr(dataset_runs, "PATH_KEY", key)
    for path in SAMPLE_TRACES[:2] + SAMPLE_TRACES[-1:]:
        memory, _ = _summary(["--engine", "memory", "--json", path], capsys)
        duckdb, _ = _summary(["--engine", "duckdb", "--json", path], capsys)
        assert duckdb == memory


@pytest.mark.unit
def test_union_leaves_out_a_run_of_another_page_size(tmp_path, capsys):
    """Both engines name the run of another page size, leave it out and
    merge the others, with the same output."""
    odd = tmp_path / "odd.log"
    odd.write_text("# pagetrace-format: 1\n# page-size: 16384\n1 /a 0\n")
    basic = os.path.join(SAMPLES, "basic.log")
    memory, duckdb = _both_engines(["merge"], capsys, [basic, str(odd)])
    assert memory == duckdb
    code, out, err = memory
    assert code == 0 and "/usr/lib" in out and " /a " not in out
    assert err.endswith(f"pagetrace: {odd}: page-size 16384 differs from "
                        "4096 of the runs before it; run 'odd' left out\n")


@pytest.mark.unit
def test_names_that_are_not_utf8_print_as_their_bytes(tmp_path):
    """summary, diff and merge print a name that is not UTF-8 as its bytes,
    whichever engine (a strict stdout used to raise UnicodeEncodeError)."""
    a = _write_run(tmp_path / "a.log", [("/opt/\\377x", 0), ("/b", 0)])
    b = _write_run(tmp_path / "b.log", [("/opt/\\377x", 4096)])
    for engine in ("memory", "duckdb"):
        for argv in (["summary", a], ["diff", a, b], ["merge", a, b]):
            done = subprocess.run(
                [sys.executable, "-m", "pagetrace.cli", argv[0], "--engine",
                 engine, *argv[1:]], capture_output=True,
                # A strict stdout, as in a UTF-8 desktop locale.
                env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
            assert done.returncode == 0, done.stderr
            assert b"/opt/\xffx" in done.stdout

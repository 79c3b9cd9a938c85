"""`pagetrace waste` and pagetrace.waste: pages read against pages used, on
samples/used.log (numbers worked out by hand below) and on synthetic
version 2 traces whose used, unused and mapped sets are known by
construction. The real tracer's end-to-end check lives in the tracer's
tests."""
import json
import os
import random

import pytest

from pagetrace import cli, metrics, read_trace, synth, waste

pytestmark = pytest.mark.unit   # needs no root (conftest.py)

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "samples")
USED_LOG = os.path.join(SAMPLES, "used.log")
PAGE = 4096
MIB = 2**20

V2_HEADER = ("# pagetrace-format: 2\n# page-size: 4096\n# clock: realtime-us\n"
             "# columns: timestamp_us path offset kind{extra}\n"
             "# records: {records}\n")
EXTRA = " pid tid comm cause dev ino"


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_v2(path, records, extra=True, records_header="read access map"):
    """records: (ts_us, path, offset, kind, cause) tuples, written in the
    order given; the cause goes into the -x columns when `extra`."""
    lines = [V2_HEADER.format(extra=EXTRA if extra else "",
                              records=records_header)]
    for ts_us, name, offset, kind, cause in records:
        line = f"{ts_us} {name} {offset} {kind}"
        if extra:
            line += f" 1 1 app {cause} 254:1 7"
        lines.append(line + "\n")
    path.write_text("".join(lines))
    return str(path)


# --- samples/used.log, by hand -----------------------------------------
#
# read records (7 pages):
#   /usr/lib/libfoo.so 0, 4096, 8192, 12288   cause fault
#   /data/my file      0, 4096, 8192          cause sync_ra
# access records: libfoo 4096 (t+5), my file 0 (t+120),
#   /etc/cached.conf 0 (t+130, never read), libfoo 0 (t+200)
# map records: libfoo 0 (t+6; accessed later, so used), libfoo 8192
#
# used   = libfoo 0, libfoo 4096, my file 0                  = 3
# unused = libfoo 8192, libfoo 12288, my file 4096, 8192     = 4 = 7 - 3
# mapped = unused with a map record = libfoo 8192            = 1
# unused by cause: fault = libfoo 8192, 12288 = 2; sync_ra = 2
# accessed not read = /etc/cached.conf 0                     = 1
# files, most unused first: libfoo (2 unused, 4 read) before my file
# (2 unused, 3 read), then cached.conf (0 read).

USED_SUMMARY = {
    "page_size": 4096, "has_cause": True,
    "read_pages": 7, "used_pages": 3, "unused_pages": 4, "mapped_pages": 1,
    "unused_by_cause": {"sync_ra": 2, "fault": 2},
    "accessed_not_read_pages": 1,
    "files": [
        {"path": "/usr/lib/libfoo.so", "read_pages": 4, "used_pages": 2,
         "unused_pages": 2, "mapped_pages": 1,
         "unused_by_cause": {"fault": 2}, "accessed_not_read_pages": 0},
        {"path": "/data/my file", "read_pages": 3, "used_pages": 1,
         "unused_pages": 2, "mapped_pages": 0,
         "unused_by_cause": {"sync_ra": 2}, "accessed_not_read_pages": 0},
        {"path": "/etc/cached.conf", "read_pages": 0, "used_pages": 0,
         "unused_pages": 0, "mapped_pages": 0, "unused_by_cause": {},
         "accessed_not_read_pages": 1}],
    "metadata": {"read_pages": 0, "files": []},
}


def test_used_sample_summary_by_hand():
    assert waste.waste_summary(read_trace(USED_LOG)) == USED_SUMMARY


def test_used_sample_page_usage():
    usage = waste.page_usage(read_trace(USED_LOG))
    assert list(usage.columns) == ["ts_us", "path", "offset", "cause",
                                   "used", "mapped"]
    t0 = 1763784000000000
    assert [tuple(r) for r in usage.itertuples(index=False)] == [
        (t0, "/usr/lib/libfoo.so", 0, "fault", True, False),
        (t0, "/usr/lib/libfoo.so", 4096, "fault", True, False),
        (t0, "/usr/lib/libfoo.so", 8192, "fault", False, True),
        (t0, "/usr/lib/libfoo.so", 12288, "fault", False, False),
        (t0 + 100, "/data/my file", 0, "sync_ra", True, False),
        (t0 + 100, "/data/my file", 4096, "sync_ra", False, False),
        (t0 + 100, "/data/my file", 8192, "sync_ra", False, False)]


def test_waste_json_on_the_sample(capsys):
    code, out, err = run_cli(capsys, "waste", "--json", USED_LOG)
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary == {"trace": USED_LOG, **USED_SUMMARY}
    # The keys issue 9 names, exactly.
    for key in ("read_pages", "used_pages", "unused_pages", "files"):
        assert key in summary
    for entry in summary["files"]:
        assert {"path", "read_pages", "used_pages", "unused_pages"} <= \
            set(entry)
    code, short, _ = run_cli(capsys, "waste", "-j", USED_LOG)
    assert (code, short) == (0, out)


def test_waste_text_on_the_sample(capsys):
    code, out, err = run_cli(capsys, "waste", USED_LOG)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["path", "read", "MiB", "used", "MiB",
                                "unused", "MiB", "unused", "%", "mapped",
                                "MiB", "cached", "MiB"]
    # MiB: 4 pages = 16384 B = 0.0156; 2 pages = 0.0078; 1 page = 0.0039;
    # 3 pages = 0.0117; 7 pages = 28672 B = 0.0273.
    assert lines[1].split() == ["/usr/lib/libfoo.so", "0.016", "0.008",
                                "0.008", "50.0%", "0.004", "0.000"]
    # Escaped as in traces: one name, one column.
    assert lines[2].split() == ["/data/my\\040file", "0.012", "0.004",
                                "0.008", "66.7%", "0.000", "0.000"]
    assert lines[3].split() == ["/etc/cached.conf", "0.000", "0.000",
                                "0.000", "-", "0.000", "0.004"]
    # 4 / 7 = 57.1%; 3 / 7 = 42.9%.
    assert lines[4].split() == ["total", "0.027", "0.012", "0.016", "57.1%",
                                "0.004", "0.004"]
    assert lines[5] == ("read 7 pages (0.027 MiB): 3 used (42.9%), 4 unused "
                        "(57.1%, 0.016 MiB), of which 1 mapped by "
                        "fault-around (possibly used)")
    assert lines[6] == ("accessed but not read (already cached, column "
                        "'cached'): 1 page")
    assert lines[7] == "unused by cause: sync_ra 2 (50.0%), fault 2 (50.0%)"
    assert len(lines) == 8


def test_top_keeps_the_largest_waste_and_sums_the_rest(capsys):
    code, out, _ = run_cli(capsys, "waste", "--top", "1", USED_LOG)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[1:4]]
    assert rows[0][0] == "/usr/lib/libfoo.so"
    # my file (3 read, 1 used, 2 unused) + cached.conf (1 cached page).
    assert rows[1] == ["(2", "more", "files)", "0.012", "0.004", "0.008",
                       "66.7%", "0.000", "0.004"]
    assert rows[2][0] == "total"


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_top_must_be_positive(capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["waste", "--top", value, USED_LOG])
    assert exit_info.value.code == 2
    assert "--top: not a positive integer" in capsys.readouterr().err


# --- synthetic traces with known sets ----------------------------------

CAUSES = ("sync_ra", "async_ra", "fault", "forced_ra", "read", "-")


def synthetic_used_trace(tmp_path, seed, extra=True):
    """A trace over 4 files whose pages are each put, at random, in one of
    the sets below; returns (trace path, the sets).

    used: read, then accessed; used_early: accessed before its read (a
    fault is seen before its read is queued); used_mapped: mapped, then
    accessed; mapped: read and mapped, never accessed; unused: read only;
    cached: accessed, never read."""
    rng = random.Random(seed)
    sets = {name: set() for name in ("used", "used_early", "used_mapped",
                                     "mapped", "unused", "cached")}
    cause = {}
    files = [f"/opt/f{i}" for i in range(3)] + ["//deleted/tmp/old"]
    for name in files:
        for page in range(rng.randrange(5, 40)):
            which = rng.choice(list(sets))
            sets[which].add((name, page * PAGE))
            cause[(name, page * PAGE)] = rng.choice(CAUSES)
    records = []
    clock = iter(range(1_000_000, 10**9, 3))
    events = []
    for which, pages in sets.items():
        for page in pages:
            kinds = {"used": ["read", "access"],
                     "used_early": ["access", "read"],
                     "used_mapped": ["read", "map", "access"],
                     "mapped": ["read", "map"], "unused": ["read"],
                     "cached": ["access"]}[which]
            events.append((page, kinds))
    rng.shuffle(events)
    # Interleave: each page's records stay in their order, pages mix.
    pending = [list(kinds) for _, kinds in events]
    while any(pending):
        i = rng.choice([k for k, p in enumerate(pending) if p])
        kind = pending[i].pop(0)
        name, offset = events[i][0]
        record_cause = cause[(name, offset)] if kind == "read" else (
            "fault" if kind == "map" else rng.choice(["read", "fault"]))
        records.append((next(clock), name, offset, kind, record_cause))
    return write_v2(tmp_path / f"s{seed}.log", records, extra=extra), \
        sets, cause


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_synthetic_sets(tmp_path, seed):
    path, sets, cause = synthetic_used_trace(tmp_path, seed)
    summary = waste.waste_summary(read_trace(path))
    used = sets["used"] | sets["used_early"] | sets["used_mapped"]
    unused = sets["mapped"] | sets["unused"]
    assert summary["read_pages"] == len(used) + len(unused)
    assert summary["used_pages"] == len(used)
    assert summary["unused_pages"] == len(unused)
    assert summary["mapped_pages"] == len(sets["mapped"])
    assert summary["accessed_not_read_pages"] == len(sets["cached"])
    by_cause = {}
    for page in unused:
        by_cause[cause[page]] = by_cause.get(cause[page], 0) + 1
    assert summary["unused_by_cause"] == by_cause
    assert sum(summary["unused_by_cause"].values()) == len(unused)
    for entry in summary["files"]:
        def count(pages, name=entry["path"]):
            return sum(1 for p in pages if p[0] == name)
        assert entry["used_pages"] == count(used)
        assert entry["unused_pages"] == count(unused)
        assert entry["mapped_pages"] == count(sets["mapped"])
        assert entry["accessed_not_read_pages"] == count(sets["cached"])
    # Most unused first; special paths keep their names.
    unused_counts = [f["unused_pages"] for f in summary["files"]]
    assert unused_counts == sorted(unused_counts, reverse=True)
    assert "//deleted/tmp/old" in [f["path"] for f in summary["files"]]
    usage = waste.page_usage(read_trace(path))
    pages = set(zip(usage["path"].astype(str), usage["offset"]))
    assert pages == used | unused
    assert set(usage.loc[usage["used"], ["path", "offset"]].itertuples(
        index=False, name=None)) == used
    assert set(usage.loc[usage["mapped"], ["path", "offset"]].itertuples(
        index=False, name=None)) == sets["mapped"]


def test_many_files_and_causes(tmp_path):
    # 100 files of 2 pages, the second unused, its cause the file number
    # modulo 6: more file × cause pairs than a small integer holds.
    records = []
    for i in range(100):
        cause = CAUSES[i % 6]
        records += [(3 * i, f"/lib/f{i}", 0, "read", cause),
                    (3 * i, f"/lib/f{i}", 4096, "read", cause),
                    (3 * i + 1, f"/lib/f{i}", 0, "access", "fault")]
    summary = waste.waste_summary(read_trace(write_v2(
        tmp_path / "many.log", records)))
    assert (summary["read_pages"], summary["used_pages"],
            summary["unused_pages"]) == (200, 100, 100)
    # 100 = 6 × 16 + 4: the first four causes get 17 files, the others 16.
    assert summary["unused_by_cause"] == {
        "sync_ra": 17, "async_ra": 17, "fault": 17, "forced_ra": 17,
        "read": 16, "-": 16}
    assert [f["unused_by_cause"] for f in summary["files"][:7]] == [
        {c: 1} for c in CAUSES + CAUSES[:1]]


def test_without_cause_column(tmp_path):
    path, sets, _ = synthetic_used_trace(tmp_path, 4, extra=False)
    summary = waste.waste_summary(read_trace(path))
    assert summary["has_cause"] is False
    assert summary["unused_by_cause"] == {}
    assert summary["unused_pages"] == len(sets["mapped"] | sets["unused"])
    assert all("unused_by_cause" not in f for f in summary["files"])
    assert waste.page_usage(read_trace(path))["cause"].isna().all()


def test_pages_read_twice_count_once(tmp_path):
    # /a 0: read (sync_ra), accessed, reclaimed, read again (fault): one
    # used page. /a 4096: read twice (async_ra, then read), never
    # accessed: one unused page, charged to its first read, async_ra.
    path = write_v2(tmp_path / "twice.log", [
        (10, "/a", 0, "read", "sync_ra"), (11, "/a", 4096, "read", "async_ra"),
        (12, "/a", 0, "access", "read"), (50, "/a", 0, "read", "fault"),
        (51, "/a", 4096, "read", "read")])
    summary = waste.waste_summary(read_trace(path))
    assert (summary["read_pages"], summary["used_pages"],
            summary["unused_pages"]) == (2, 1, 1)
    assert summary["unused_by_cause"] == {"async_ra": 1}
    usage = waste.page_usage(read_trace(path))
    assert usage["ts_us"].tolist() == [10, 11]
    assert usage["cause"].astype(str).tolist() == ["sync_ra", "async_ra"]


def test_metadata_reads_are_counted_apart(tmp_path):
    path = write_v2(tmp_path / "meta.log", [
        (1, "/dev/vda1", 0, "read", "metadata"),
        (2, "/dev/vda1", 8192, "read", "metadata"),
        (3, "/f", 0, "read", "sync_ra"), (4, "/f", 4096, "read", "sync_ra"),
        (5, "/f", 0, "access", "read")])
    summary = waste.waste_summary(read_trace(path))
    assert (summary["read_pages"], summary["used_pages"],
            summary["unused_pages"]) == (2, 1, 1)
    assert [f["path"] for f in summary["files"]] == ["/f"]
    assert summary["unused_by_cause"] == {"sync_ra": 1}
    assert summary["metadata"] == {
        "read_pages": 2, "files": [{"path": "/dev/vda1", "read_pages": 2}]}
    _, rows = waste.waste_rows(summary)
    assert [r[0] for r in rows] == ["/f", "total"]
    assert waste.waste_text(summary).splitlines()[-1] == (
        "metadata (not counted above): 2 pages (0.008 MiB) from /dev/vda1")


# --- refusals and bad input --------------------------------------------

def _refusal(capsys, *args):
    """`pagetrace waste ARGS`' one line on stderr, once it has exited 1 with
    nothing on stdout and no traceback."""
    code, out, err = run_cli(capsys, "waste", *args)
    assert (code, out) == (1, "")
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err.rstrip("\n")


def test_version_1_trace_is_refused(capsys):
    basic = os.path.join(SAMPLES, "basic.log")
    assert _refusal(capsys, basic) == (
        f"pagetrace: {basic}: no access records in a version 1 trace, so "
        "used pages cannot be told from unused ones; record one with "
        "trace --used -c CMD")
    with pytest.raises(waste.NoAccessRecordsError):
        waste.page_usage(read_trace(basic))
    assert not waste.has_access_records(read_trace(basic))


def test_version_2_without_access_records_is_refused(capsys, tmp_path):
    path = write_v2(tmp_path / "noaccess.log", [
        (1, "/f", 0, "read", "sync_ra"), (2, "/f", 0, "map", "fault")],
        records_header="read map")
    err = _refusal(capsys, "--json", path)
    assert "no access records in a version 2 trace" in err
    assert err.endswith("record one with trace --used -c CMD")


def test_missing_file(capsys, tmp_path):
    missing = str(tmp_path / "nothing.log")
    assert _refusal(capsys, missing) == \
        f"pagetrace: {missing}: No such file or directory"


def test_malformed_records_are_flagged_and_skipped(capsys, tmp_path):
    path = write_v2(tmp_path / "bad.log", [
        (1, "/f", 0, "read", "sync_ra"), (2, "/f", 4096, "read", "sync_ra"),
        (3, "/f", 0, "touch", "read"), (4, "/f", 0, "access", "read")])
    code, out, err = run_cli(capsys, "waste", "--json", path)
    # 5 header lines, so line 8 is the record of the unknown kind; the
    # rest is counted.
    assert code == 0
    assert err == f"pagetrace: {path}:8: unknown record kind 'touch'\n"
    summary = json.loads(out)
    assert (summary["read_pages"], summary["used_pages"],
            summary["unused_pages"]) == (2, 1, 1)


def test_unknown_version(capsys):
    path = os.path.join(SAMPLES, "unknown-version.log")
    assert _refusal(capsys, path) == (
        f"pagetrace: {path}: unsupported trace format version '3' "
        "(this reader knows 1, 2)")


# --- the synthetic version 2 generator ---------------------------------

def test_synthetic_v2_trace(tmp_path):
    v1, v2 = tmp_path / "v1.log", tmp_path / "v2.log"
    synth.write_synthetic_trace(v1, 5000, n_files=20, seed=7)
    synth.write_synthetic_trace(v2, 5000, n_files=20, seed=7, used=0.6,
                                mapped=0.5)
    reads, used = read_trace(v1), read_trace(v2)
    # The same reads, plus the records of use.
    assert metrics.totals(used) == metrics.totals(reads)
    assert metrics.trace_seek_report(used) == metrics.trace_seek_report(reads)
    kinds = used["kind"].astype(str).value_counts()
    assert kinds["read"] == 5000
    summary = waste.waste_summary(used)
    distinct = len(reads.drop_duplicates(["path", "offset"]))
    assert summary["read_pages"] == distinct
    # One access (map) record per accessed (mapped) page, only for pages
    # read: the generator makes no cache hits.
    assert summary["used_pages"] == kinds["access"]
    assert summary["mapped_pages"] == kinds["map"]
    assert summary["accessed_not_read_pages"] == 0
    # Seeded shares: about 60% used, half of the rest mapped.
    assert 0.55 < summary["used_pages"] / distinct < 0.65
    assert 0.45 < summary["mapped_pages"] / summary["unused_pages"] < 0.55
    assert used.attrs["trailer"]["pages"] == 5000

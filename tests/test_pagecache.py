"""scripts/pagecache against the real kernel (as root).

Ground truth for residency is mincore(2) through tests/pagecache_util.py,
which does not share code with the tool. Every file lives in a fresh
directory under /var/tmp (a block-device filesystem: tmpfs pages cannot be
evicted) and is removed afterwards.
"""
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO, require_root
import pagecache_util
from pagecache_util import PAGE, cached_since_eviction, resident_pages

PAGECACHE = os.path.join(REPO, "scripts", "pagecache")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def workdir():
    """A fresh, world-readable directory on a block-device filesystem."""
    require_root()
    path = tempfile.mkdtemp(prefix="pagecache-test-", dir="/var/tmp")
    os.chmod(path, 0o755)
    # Major 0 would be tmpfs or another device-less filesystem.
    assert os.major(os.stat(path).st_dev) != 0, f"{path} is not on a block device"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_file(path, size, sync=True):
    """A file of @size bytes, different on every page; clean unless sync=False."""
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        if sync:
            os.fsync(f.fileno())
    return path


def read_whole(path):
    with open(path, "rb") as f:
        return f.read()


def run_pagecache(*args, prefix=(), timeout=30):
    return subprocess.run([*prefix, PAGECACHE, *args], capture_output=True,
                          text=True, timeout=timeout)


def run_json(*args, **kwargs):
    done = run_pagecache(*args, "--json", **kwargs)
    return done, json.loads(done.stdout)


def expand(runs):
    return {page for first, end in runs for page in range(first, end)}


# ---------------------------------------------------------------------------
# evict

def test_evict_leaves_no_cached_pages_in_unmapped_files(workdir):
    files = [make_file(os.path.join(workdir, name), size) for name, size in
             (("small", 5000), ("medium", 300 * 1024), ("large", 3 << 20))]
    before = {f: (read_whole(f), os.stat(f).st_mtime_ns) for f in files}
    assert all(resident_pages(f) for f in files), "precondition: files cached"

    done, report = run_json("evict", *files)

    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in report["files"]] == ["evicted"] * 3
    assert [r["cached_after"] for r in report["files"]] == [0, 0, 0]
    assert report["method"] == "cachestat"
    status = run_json("status", *files)[1]
    assert [r["cached"] for r in status["files"]] == [0, 0, 0]
    assert all(resident_pages(f) == set() for f in files)
    # The tool never writes to the files it handles.
    assert {f: (read_whole(f), os.stat(f).st_mtime_ns) for f in files} == before


def test_evict_syncs_dirty_pages_first_or_refuses(workdir):
    dirty = make_file(os.path.join(workdir, "dirty"), 64 * 1024, sync=False)
    assert run_json("status", dirty)[1]["files"][0]["dirty"] > 0, "precondition"

    refused, report = run_json("evict", "--no-sync", dirty)
    assert refused.returncode == 1
    assert report["files"][0]["status"] == "refused"
    assert "dirty" in report["files"][0]["reason"]
    assert resident_pages(dirty), "a refused eviction must leave the pages"

    done, report = run_json("evict", dirty)
    assert done.returncode == 0, done.stderr
    assert report["files"][0]["synced"] is True
    assert report["files"][0]["status"] == "evicted"
    assert resident_pages(dirty) == set()


MAPPER = """
import mmap, os, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)  # fault in only the pages touched
touched = sum(m[int(p) * mmap.PAGESIZE] for p in sys.argv[2:])
print("mapped", flush=True)
sys.stdin.read()  # live until the test closes stdin
"""


def test_evict_reports_pages_mapped_by_a_live_process(workdir):
    path = make_file(os.path.join(workdir, "mapped.so"), 32 * PAGE)
    unmapped = make_file(os.path.join(workdir, "plain"), 8 * PAGE)
    run_pagecache("evict", path)
    child = subprocess.Popen([sys.executable, "-c", MAPPER, path, "2", "17", "30"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "mapped"
        done, report = run_json("evict", path, unmapped)
        ground_truth = resident_pages(path)
    finally:
        child.stdin.close()
        child.wait(timeout=10)

    assert done.returncode == 1, "pages that stayed resident make exit status 1"
    mapped, plain = report["files"]
    assert plain["status"] == "evicted" and plain["cached_after"] == 0
    assert mapped["status"] == "partial"
    assert {2, 17, 30} <= ground_truth, "precondition: touched pages resident"
    explained = {p for piece in mapped["resident"]
                 for p in range(piece["first_page"], piece["end_page"])}
    assert explained == ground_truth
    assert mapped["cached_after"] == len(ground_truth)
    for piece in mapped["resident"]:
        assert [m["pid"] for m in piece["mapped_by"]] == [child.pid]
        assert f"pid {child.pid} (python" in piece["reason"]
    # With the process gone, nothing holds the pages any more.
    done, report = run_json("evict", path)
    assert done.returncode == 0 and report["files"][0]["status"] == "evicted"
    assert resident_pages(path) == set()


# ---------------------------------------------------------------------------
# status

def make_partly_cached(workdir, pages_to_read, npages=64):
    """A file of which only some pages are cached (no readahead around them)."""
    path = make_file(os.path.join(workdir, "partial"), npages * PAGE)
    run_pagecache("evict", path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for page in pages_to_read:
            os.pread(fd, 100, page * PAGE)
    finally:
        os.close(fd)
    return path


@pytest.mark.parametrize("method", ["cachestat", "mincore"])
def test_status_agrees_with_mincore_page_for_page(workdir, method):
    path = make_partly_cached(workdir, [0, 3, 10, 11, 12, 40, 63])
    ground_truth = resident_pages(path)
    assert 0 < len(ground_truth) < 64, "precondition: partly cached"

    done, report = run_json("status", "--pages", "--method", method, path)

    assert done.returncode == 0, done.stderr
    row = report["files"][0]
    assert report["method"] == method
    assert expand(row["resident"]) == ground_truth
    assert row["cached"] == len(ground_truth)
    assert row["pages"] == 64 and row["size"] == 64 * PAGE
    assert row["percent"] == round(100.0 * len(ground_truth) / 64, 1)


def test_status_table_has_every_file_and_a_total(workdir):
    a = make_file(os.path.join(workdir, "a"), 10 * PAGE)
    b = make_file(os.path.join(workdir, "b"), 3 * PAGE + 1)
    run_pagecache("evict", b)

    done = run_pagecache("status", a, b)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["SIZE", "PAGES", "CACHED", "%", "DIRTY",
                                "WRITEBACK", "EVICTED", "RECENT", "FILE"]
    rows = {line.split()[-1]: line.split() for line in lines[1:4]}
    assert rows[a][1:4] == ["10", "10", "100.0"]
    assert rows[b][1:4] == ["4", "0", "0.0"]
    assert rows["TOTAL"][1:3] == ["14", "10"]
    assert lines[-1] == "method: cachestat(2)"


def test_mincore_refuses_files_whose_state_the_kernel_hides(workdir):
    # For a file the caller neither owns nor may write, mincore(2) claims
    # every page resident: the tool must refuse rather than print 100%.
    path = make_file(os.path.join(workdir, "roots"), 4 * PAGE)
    run_pagecache("evict", path)
    for method in ("mincore", "cachestat"):
        done = run_pagecache("status", "--method", method, path, prefix=NOBODY)
        assert done.returncode == 1
        assert f"pagecache: {path}: {method}: Operation not permitted" in done.stderr
        assert "owner" in done.stderr


# ---------------------------------------------------------------------------
# warm

def test_warm_reads_every_page_of_a_walked_directory(workdir):
    os.mkdir(os.path.join(workdir, "sub"))
    files = [make_file(os.path.join(workdir, "top"), 5 * PAGE),
             make_file(os.path.join(workdir, "sub", "deep"), 20 * PAGE + 7)]
    run_pagecache("evict", *files)
    assert not any(resident_pages(f) for f in files), "precondition"

    done, report = run_json("warm", "-r", workdir)

    assert done.returncode == 0, done.stderr
    assert sorted(r["path"] for r in report["files"]) == sorted(files)
    assert cached_since_eviction(files[0]) == set(range(5))
    assert cached_since_eviction(files[1]) == set(range(21))


# ---------------------------------------------------------------------------
# --trace

def write_trace(path, lines, version=1):
    with open(path, "w") as f:
        f.write(f"# pagetrace-format: {version}\n# page-size: 4096\n")
        f.write("# columns: timestamp_us path offset\n")
        f.writelines(line + "\n" for line in lines)
    return path


def test_trace_paths_are_unescaped_and_special_paths_skipped(workdir):
    odd = make_file(os.path.join(workdir, "a b\nc\\d"), 8 * PAGE)
    escaped = odd.replace("\\", "\\134").replace(" ", "\\040").replace("\n", "\\012")
    trace = write_trace(os.path.join(workdir, "t.log"), [
        f"100 {escaped} 0", f"101 {escaped} 8192", f"102 {escaped} 0",
        "103 //deleted/tmp/gone 0", "104 //unknown/254:1/77 4096",
        "105 /only/two",
    ])
    run_pagecache("evict", odd)

    done, report = run_json("status", "--trace", trace)

    assert done.returncode == 0, done.stderr
    assert [r["path"] for r in report["files"]] == [odd]
    assert report["files"][0]["traced_pages"] == 2
    assert report["files"][0]["traced_cached"] == 0
    assert "skipped 2 special path(s)" in done.stderr
    assert f"pagecache: {trace}:9: fewer than three fields" in done.stderr


def test_unknown_trace_version_is_rejected(workdir):
    done = run_pagecache("status", "--trace",
                         os.path.join(REPO, "samples", "unknown-version.log"))
    # A refused trace: one line, exit status 1 (docs/trace-format.md).
    assert done.returncode == 1
    path = os.path.join(REPO, "samples", "unknown-version.log")
    assert done.stderr == (f"pagecache: {path}: unsupported trace format "
                           "version '3' (this reader knows 1, 2)\n")


# ---------------------------------------------------------------------------
# bad input

def test_missing_file_is_reported_and_the_rest_handled(workdir):
    good = make_file(os.path.join(workdir, "good"), PAGE)
    missing = os.path.join(workdir, "missing")
    done, report = run_json("status", missing, good)
    assert done.returncode == 1
    assert f"pagecache: {missing}: No such file or directory" in done.stderr
    assert [r["path"] for r in report["files"]] == [good]
    assert report["errors"] == [{"path": missing, "error": "No such file or directory"}]


def test_directory_needs_r(workdir):
    make_file(os.path.join(workdir, "inside"), PAGE)
    done = run_pagecache("evict", workdir)
    assert done.returncode == 1
    assert f"pagecache: {workdir}: Is a directory (use -r to walk it)" in done.stderr
    assert run_pagecache("evict", "-r", workdir).returncode == 0


def test_fifo_is_never_opened(workdir):
    fifo = os.path.join(workdir, "fifo")
    os.mkfifo(fifo)
    for command in ("status", "evict", "warm"):
        # A blocking open of a FIFO without a writer would hang: the timeout
        # turns that into a failure.
        done = run_pagecache(command, fifo, timeout=10)
        assert done.returncode == 1
        assert f"pagecache: {fifo}: is a FIFO, skipped" in done.stderr
    done = run_pagecache("warm", "-r", workdir, timeout=10)
    assert f"pagecache: {fifo}: is a FIFO, skipped" in done.stderr


def test_symlinks_are_followed_only_when_asked(workdir):
    target = make_file(os.path.join(workdir, "target"), 2 * PAGE)
    link = os.path.join(workdir, "link")
    os.symlink(target, link)
    done = run_pagecache("status", link)
    assert done.returncode == 1
    assert f"pagecache: {link}: is a symbolic link, not followed (use --follow)" in done.stderr
    done, report = run_json("status", "--follow", link)
    assert done.returncode == 0
    assert report["files"][0]["pages"] == 2


def test_unreadable_file_is_reported_and_skipped(workdir):
    secret = make_file(os.path.join(workdir, "secret"), PAGE)
    os.chmod(secret, 0o600)
    public = make_file(os.path.join(workdir, "public"), PAGE)
    done = run_pagecache("evict", "--json", secret, public, prefix=NOBODY)
    assert done.returncode == 1
    assert f"pagecache: {secret}: Permission denied" in done.stderr
    report = json.loads(done.stdout)
    # nobody may drop pages of a file it can read, but not see the result.
    assert [(r["path"], r["status"]) for r in report["files"]] == [(public, "unverified")]


def test_usage_errors(workdir):
    assert run_pagecache("status").returncode == 2
    assert run_pagecache("frobnicate", "x").returncode == 2
    missing = os.path.join(workdir, "nope.log")
    done = run_pagecache("status", "--trace", missing)
    assert done.returncode == 1
    assert done.stderr == f"pagecache: {missing}: No such file or directory\n"


@pytest.mark.unit
def test_version():
    done = run_pagecache("--version")
    assert done.returncode == 0 and done.stdout.startswith("pagecache (pagetrace) ")


def test_v2_trace_uses_read_records_only(workdir):
    read_only = make_file(os.path.join(workdir, "read"), 3 * PAGE)
    accessed = make_file(os.path.join(workdir, "accessed"), 2 * PAGE)
    trace = os.path.join(workdir, "used.log")
    with open(trace, "w") as f:
        f.write("# pagetrace-format: 2\n# columns: timestamp_us path offset kind\n"
                "# records: read access map\n"
                f"1 {read_only} 0 read\n2 {read_only} 8192 read\n"
                f"3 {read_only} 4096 access\n4 {accessed} 0 access\n"
                f"5 {accessed} 4096 map\n")
    done, report = run_json("status", "--trace", trace)
    assert done.returncode == 0, done.stderr
    assert [(r["path"], r["traced_pages"]) for r in report["files"]] == [
        (read_only, 2)]


@pytest.mark.unit
def test_help_has_examples():
    done = run_pagecache("--help")
    assert done.returncode == 0
    assert "examples:" in done.stdout and "pagecache evict --trace" in done.stdout


def test_the_tests_evict_fails_on_a_page_that_stays(workdir):
    """tests/pagecache_util.evict, which every eviction in the tests goes
    through, asks again for a page held a moment, but a page that stays
    (here mapped and touched by this process) fails it, after EVICT_TRIES
    asks; a file nobody holds is left with no page cached."""
    held, free = os.path.join(workdir, "held"), os.path.join(workdir, "free")
    make_file(held, 16 * PAGE)
    make_file(free, 16 * PAGE)
    with open(free, "rb") as f:
        f.read()
    pagecache_util.evict(free)
    assert resident_pages(free) == set()
    with open(held, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        m[5 * PAGE]
        with pytest.raises(AssertionError,
                           match=f"DONTNEED {pagecache_util.EVICT_TRIES} times"):
            pagecache_util.evict(held)
        assert 5 in resident_pages(held)

"""trace --used (format version 2) against the kernel's own ground truth.

Files live on a loop-mounted ext4 whose loop device has a large
read_ahead_kb, so that readahead brings in far more than a program touches:
the difference between "read" and "accessed" is the point of --used.

Ground truth, never the code under test:
  * read records    == pages that became resident since eviction (mincore,
                       plus pages reclaimed again since, by shadow entry);
  * access records  == the pages the workload touched (the test decides);
  * map records     == pages present in the workload's own page tables
                       (/proc/self/pagemap) that it did not touch;
  * unused          == resident - touched.
"""
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import loopimg
from conftest import REPO, require_root
sys.path.insert(0, os.path.join(REPO, "analysis"))
from pagetrace import throttle  # noqa: E402
from pagecache_util import (PAGE, cached_since_eviction, evict, locked_in_cache,
                            resident_pages, write_file)
from trace_oracle import Trace

TRACE = os.path.join(REPO, "tracer", "trace")
DUMP = os.path.join(REPO, "replay", ".output", "tracefile-dump")
MiB = 1 << 20
READ_AHEAD_KB = 4096


@pytest.fixture(scope="module")
def big_ra_ext4():
    require_root()
    with loopimg.loop_mount("ext4", size_mib=256) as (mountpoint, loop):
        knob = f"/sys/block/{os.path.basename(loop)}/queue/read_ahead_kb"
        with open(knob, "w") as f:
            f.write(str(READ_AHEAD_KB))
        yield mountpoint


@pytest.fixture
def data_dir(big_ra_ext4, request):
    path = os.path.join(big_ra_ext4, request.node.name.replace("[", "_").replace("]", ""))
    os.makedirs(path, exist_ok=True)
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


class UsedTrace(Trace):
    """The test oracle, plus record kinds (field 4 in version 2)."""

    def kind_pages(self, path, kind):
        return [off // PAGE for _, p, off, extra in self.records
                if p == path and extra[0] == kind]

    def kind_set(self, path, kind):
        pages = self.kind_pages(path, kind)
        return set(pages)


def run_used(tmp_path, *args, check_rc=0):
    require_root()
    assert os.access(TRACE, os.X_OK), "tracer/trace is not built: run make"
    log = tmp_path / "used.log"
    proc = subprocess.run([TRACE, "--used", "-o", str(log), *args], capture_output=True,
                          text=True, errors="surrogateescape", timeout=120)
    assert proc.returncode == check_rc, proc.stderr
    text = log.read_text(errors="surrogateescape")
    return UsedTrace(text), proc, log


def python_cmd(code):
    return ["--", sys.executable, "-c", textwrap.dedent(code)]


def check_v2_shape(trace):
    assert trace.header["pagetrace-format"] == "2"
    assert trace.header["columns"].split()[:4] == ["timestamp_us", "path", "offset", "kind"]
    assert trace.header["records"] == "read access map"
    assert trace.header["tracer"].endswith(", used)")
    kinds = [r[3][0] for r in trace.records]
    assert set(kinds) <= {"read", "access", "map"}
    assert int(trace.trailer["accessed"]) == kinds.count("access")
    assert int(trace.trailer["mapped"]) == kinds.count("map")
    assert int(trace.trailer["pages"]) == kinds.count("read")
    assert trace.trailer["lost"] == "0"
    # First access only, one map record per page: never a page twice.
    for kind in ("access", "map"):
        seen = [(r[1], r[2]) for r in trace.records if r[3][0] == kind]
        assert len(seen) == len(set(seen)), f"a page has two {kind} records"


def test_scattered_preads(data_dir, tmp_path):
    f = os.path.join(data_dir, "scattered.bin")
    write_file(f, 64 * MiB)
    evict(f)
    # Pages 0 and 1 start a readahead window (a read at 0, then a sequential
    # one); the rest are random single pages, 6 MiB apart, read as they are.
    touched = [0, 1] + [i * 1500 + 7 for i in range(1, 9)]
    trace, _, _ = run_used(tmp_path, "-x", *python_cmd(f"""
        import os
        fd = os.open({f!r}, os.O_RDONLY)
        for page in {touched!r}:
            assert len(os.pread(fd, {PAGE}, page * {PAGE})) == {PAGE}
        """))
    check_v2_shape(trace)
    resident = cached_since_eviction(f)
    assert trace.kind_set(f, "access") == set(touched)
    assert trace.kind_set(f, "read") == resident
    assert trace.kind_set(f, "map") == set()
    unused = trace.kind_set(f, "read") - trace.kind_set(f, "access")
    assert unused == resident - set(touched)
    assert unused, "readahead read nothing beyond the touched pages: the test lost its point"
    causes = {r[3][4] for r in trace.records if r[1] == f and r[3][0] == "access"}
    assert causes == {"read"}


PAGEMAP_HELPER = """
import ctypes, mmap, os, struct
def map_address(path):
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip("\\n").endswith(" " + path):
                return int(line.split("-")[0], 16)
    raise SystemExit("mapping not found")
def present_pages(addr, npages):
    with open("/proc/self/pagemap", "rb") as pm:
        pm.seek(addr // {page} * 8)
        raw = pm.read(npages * 8)
    return [i for i in range(npages) if struct.unpack_from("<Q", raw, i * 8)[0] >> 63]
"""


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp"])
def test_mmap_touches(data_dir, tmp_path, attach):
    f = os.path.join(data_dir, "mapped.bin")
    npages = 64 * MiB // PAGE
    write_file(f, 64 * MiB)
    evict(f)
    far = [i * 2048 + 100 for i in range(8)]  # 8 MiB apart
    near = [p + 40 for p in far[:3]]          # inside the read-around of a far one
    touched = far + near
    out = tmp_path / "present.json"
    trace, _, _ = run_used(tmp_path, "-x", "--attach", attach, *python_cmd(PAGEMAP_HELPER.format(page=PAGE) + f"""
import json
fd = os.open({f!r}, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
for page in {touched!r}:
    m[page * {PAGE}]
json.dump(present_pages(map_address({f!r}), {npages}), open({str(out)!r}, "w"))
"""))
    check_v2_shape(trace)
    assert f"{attach}, bpf_loop, used)" in trace.header["tracer"]
    present = set(json.loads(out.read_text()))
    resident = cached_since_eviction(f)
    assert trace.kind_set(f, "access") == set(touched)
    assert trace.kind_set(f, "read") == resident
    # Fault-around mapped the neighbours of the near touches, nothing else.
    assert trace.kind_set(f, "map") == present - set(touched)
    assert trace.kind_set(f, "map"), "fault-around mapped nothing: the test lost its point"
    causes = {r[3][4] for r in trace.records if r[1] == f and r[3][0] in ("access", "map")}
    assert causes == {"fault"}


def test_calls_with_a_negative_number_between_faults(data_dir, tmp_path):
    """test_mmap_touches with syscall(-1) after each touch: one program sees
    faults and sys_enter, and takes a call whose number is below 0 for a
    fault at a kernel address (programs.bpf.h, raw_kern_entry). Each touch
    is still one access, what fault-around mapped besides them is mapped,
    nothing is lost (check_v2_shape), and the calls, ENOSYS, count nothing."""
    f = os.path.join(data_dir, "negative.bin")
    npages = 64 * MiB // PAGE
    write_file(f, 64 * MiB)
    evict(f)
    far = [i * 2048 + 100 for i in range(8)]
    touched = far + [p + 40 for p in far[:3]]
    out = tmp_path / "present.json"
    trace, _, _ = run_used(tmp_path, "-x", *python_cmd(PAGEMAP_HELPER.format(page=PAGE) + f"""
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open({f!r}, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
for page in {touched!r}:
    m[page * {PAGE}]
    assert libc.syscall(ctypes.c_long(-1)) == -1 and ctypes.get_errno() == errno.ENOSYS
json.dump(present_pages(map_address({f!r}), {npages}), open({str(out)!r}, "w"))
"""))
    check_v2_shape(trace)
    present = set(json.loads(out.read_text()))
    assert trace.kind_set(f, "access") == set(touched)
    assert trace.kind_set(f, "read") == cached_since_eviction(f)
    assert trace.kind_set(f, "map") == present - set(touched)
    assert trace.kind_set(f, "map"), "fault-around mapped nothing: the test lost its point"


def test_faults_taken_in_the_kernel(data_dir, tmp_path):
    """Pages of a cached, mapped file that only the kernel touches: each is
    written from the mapping into a pipe, so that the copy from user memory
    takes the fault in kernel mode (exceptions:page_fault_kernel) and
    fault-around serves it from the cache. As for user-mode faults
    (test_mmap_touches), the written pages are accesses and the rest of what
    fault-around mapped is mapped; a kernel-mode fault not seen leaves its
    page mapped only."""
    f = os.path.join(data_dir, "written.bin")
    npages = 16 * MiB // PAGE
    write_file(f, 16 * MiB)
    with open(f, "rb") as cached:
        while cached.read(MiB):
            pass
    touched = [i * 512 + 100 for i in range(8)]  # 2 MiB apart
    out = tmp_path / "present.json"
    trace, _, _ = run_used(tmp_path, "-x", *python_cmd(PAGEMAP_HELPER.format(page=PAGE) + f"""
import json
fd = os.open({f!r}, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
view = memoryview(m)
r, w = os.pipe()  # 8 pages: within the pipe's capacity, never read
for page in {touched!r}:
    assert os.write(w, view[page * {PAGE}:(page + 1) * {PAGE}]) == {PAGE}
json.dump(present_pages(map_address({f!r}), {npages}), open({str(out)!r}, "w"))
"""))
    check_v2_shape(trace)
    present = set(json.loads(out.read_text()))
    assert set(touched) <= present
    assert trace.kind_set(f, "access") == set(touched)
    assert trace.kind_set(f, "map") == present - set(touched)
    assert trace.kind_set(f, "map"), "fault-around mapped nothing: the test lost its point"
    causes = {r[3][4] for r in trace.records if r[1] == f and r[3][0] in ("access", "map")}
    assert causes == {"fault"}


MMAP_CONTEND = os.path.join(REPO, "samples", ".output", "mmap-contend")


def contended_file(data_dir):
    """A 64 MiB file, all cached, for samples/mmap-contend."""
    assert os.access(MMAP_CONTEND, os.X_OK), "make -C samples builds mmap-contend"
    f = os.path.join(data_dir, "contended.bin")
    write_file(f, 64 * MiB)
    with open(f, "rb") as cached:
        while cached.read(MiB):
            pass
    return f


def touched_pages(stderr):
    """The pages samples/mmap-contend touched: its JSON list on stderr."""
    return set(json.loads(next(line for line in reversed(stderr.splitlines())
                               if line.startswith("["))))


def assert_every_touch_accessed(data_dir, tmp_path, mode):
    """samples/mmap-contend MODE under trace --used: its 512 touched pages
    are accesses, none only mapped, and nothing is lost."""
    f = contended_file(data_dir)
    trace, proc, _ = run_used(tmp_path, "--", MMAP_CONTEND, mode, f)
    touched = touched_pages(proc.stderr)
    assert len(touched) == 512
    assert trace.trailer["lost"] == "0"
    assert trace.kind_set(f, "access") == touched
    assert not trace.kind_set(f, "map") & touched


def test_faults_while_another_thread_holds_the_mmap_lock(data_dir, tmp_path):
    """Each touch of samples/mmap-contend is a fault whose fault-around
    looks its VMA up while a second thread takes the mmap lock for writing
    in a loop (bpf_find_vma's trylock then fails): every touched page is
    an access, none only mapped (page_access.bpf.h, fault_vma(); before it,
    77 to 311 of 512 were recorded as mapped only). Cached and unmapped at
    the start, so the touches are the only faults on the file."""
    f = contended_file(data_dir)
    trace, proc, _ = run_used(tmp_path, "--", MMAP_CONTEND, f)
    touched = touched_pages(proc.stderr)
    assert len(touched) == 512
    assert trace.kind_set(f, "access") == touched
    assert not trace.kind_set(f, "map") & touched


def test_first_faults_in_mappings_while_the_mmap_lock_is_busy(data_dir, tmp_path):
    """samples/mmap-contend --remap: each touch is the first fault in a
    mapping made just before it, while a second thread maps and unmaps in a
    loop, so fault-around's VMA lookup often finds the mmap lock busy; the
    maple tree read during the fault then gives the VMA (vma_lookup.bpf.h);
    a fault it gives none is counted lost (fault_around_lost()).
    Each touched page is an access, unless the trace says it lost as many
    faults (exit status 3): never lost silently. Before, 18 and 50 of 512
    touches were recorded as mapped only, with "0 lost"."""
    f = contended_file(data_dir)
    log = tmp_path / "used.log"
    proc = subprocess.run([TRACE, "--used", "-o", str(log), "--", MMAP_CONTEND, "--remap", f],
                          capture_output=True, text=True, timeout=120)
    trace = UsedTrace(log.read_text())
    lost = int(trace.trailer["lost"])
    assert proc.returncode == (3 if lost else 0), proc.stderr
    touched = touched_pages(proc.stderr)
    assert len(touched) == 512
    accessed = trace.kind_set(f, "access")
    assert accessed <= touched
    assert len(touched - accessed) <= lost, (sorted(touched - accessed), lost)
    # The ceiling (2026-11-28, 6.18: 0 lost in 90 runs, 40 of them beside
    # two busy loops; before the mmap's VMA was kept, 10 of 30 runs lost 1
    # to 308, and CI's run lost 298; 2026-11-30, with the maple tree read and
    # neither the records nor the deferral: docs/lab/trace-load-and-cost.md).
    assert lost <= 8, (len(accessed), lost)


def test_first_faults_of_new_threads_while_the_mmap_lock_is_busy(data_dir, tmp_path):
    """samples/mmap-contend --threads: each touch is made by a thread of its
    own, its first fault in a mapping its process's main thread made, while
    another thread maps and unmaps in a loop, so fault-around's VMA lookup
    often finds the mmap lock busy and the faulting thread knows no VMA of
    its own. The maple tree read during the fault gives the VMA: every
    touched page is an access and nothing is lost (with neither it nor a
    record of the process's mmaps, 1, 6 and 12 faults were counted lost in
    three runs, 6.18: deferred, then lost when the thread ended)."""
    assert_every_touch_accessed(data_dir, tmp_path, "--threads")


def test_first_faults_in_mappings_unmapped_before_the_next_system_call(data_dir, tmp_path):
    """samples/mmap-contend --unmap: each touch is a new thread's first
    fault in a mapping of its own, one of 512 made before the first touch
    (more than a process's records hold), while another thread maps and
    unmaps in a loop; the main thread unmaps it right after the touch,
    before the touching thread's next system call. Where bpf_find_vma()
    finds the mmap lock busy, the VMA is read from the maple tree during
    the fault (tracer/vma_lookup.bpf.h); without it (and on kernels before
    the maple tree, v6.1) the fault-around was deferred to a next system
    call at which no VMA held the page any more: counted lost (77, 87 and
    84 of 512 in three runs, 6.18, 2026-11-28; with the maple tree read but
    no second walk after a node replaced under it, 0 to 2; 0 in 30 runs
    since)."""
    assert_every_touch_accessed(data_dir, tmp_path, "--unmap")


def test_major_fault_among_cached_pages(data_dir, tmp_path):
    # A fault on an absent page whose fault-around window holds cached
    # pages: the tracer leaves the first fault-around to the fault's retry
    # (docs/tracer.md), which must still record every page fault-around
    # mapped. Ground truth: the process's own page tables.
    f = os.path.join(data_dir, "holes.bin")
    npages = 1 * MiB // PAGE
    write_file(f, 1 * MiB)
    fd = os.open(f, os.O_RDONLY)
    try:
        os.pread(fd, 1 * MiB, 0)                      # every page cached
        os.posix_fadvise(fd, 20 * PAGE, 4 * PAGE, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    out = tmp_path / "present.json"
    trace, _, _ = run_used(tmp_path, *python_cmd(PAGEMAP_HELPER.format(page=PAGE) + f"""
import json
fd = os.open({f!r}, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
m[21 * {PAGE}]
json.dump(present_pages(map_address({f!r}), {npages}), open({str(out)!r}, "w"))
"""))
    check_v2_shape(trace)
    present = set(json.loads(out.read_text()))
    assert trace.kind_set(f, "access") == {21}
    assert 21 in trace.kind_set(f, "read")
    assert trace.kind_set(f, "map") == present - {21}
    assert present - {21} - set(range(20, 24)), \
        "fault-around mapped no page that was cached before: the test lost its point"


def test_big_read_of_a_short_file(data_dir, tmp_path):
    f = os.path.join(data_dir, "short.txt")
    with open(f, "w") as fh:
        fh.write("0123456789")
    evict(f)
    trace, _, _ = run_used(tmp_path, *python_cmd(f"""
        import os
        fd = os.open({f!r}, os.O_RDONLY)
        assert len(os.read(fd, 128 * 1024)) == 10
        """))
    check_v2_shape(trace)
    assert trace.kind_pages(f, "access") == [0]
    assert trace.kind_set(f, "read") == {0}


def test_rereading_a_file_ten_times(data_dir, tmp_path):
    f = os.path.join(data_dir, "reread.bin")
    write_file(f, 4 * MiB)
    evict(f)
    trace, _, _ = run_used(tmp_path, "-c", f"for i in 1 2 3 4 5 6 7 8 9 10; do cat {f}; done >/dev/null")
    check_v2_shape(trace)
    pages = set(range(4 * MiB // PAGE))
    assert sorted(trace.kind_pages(f, "access")) == sorted(pages)  # each exactly once
    assert trace.kind_set(f, "read") == cached_since_eviction(f)


def test_cached_file_gives_access_without_read(data_dir, tmp_path):
    f = os.path.join(data_dir, "warm.bin")
    write_file(f, 1 * MiB)
    with locked_in_cache(f):
        trace, _, _ = run_used(tmp_path, "-c", f"cat {f} >/dev/null")
    check_v2_shape(trace)
    assert trace.kind_set(f, "read") == set()
    assert trace.kind_set(f, "access") == set(range(1 * MiB // PAGE))


def test_writes_give_no_read_and_no_access(data_dir, tmp_path):
    f = os.path.join(data_dir, "written.bin")
    trace, _, _ = run_used(tmp_path, *python_cmd(f"""
        import os
        with open({f!r}, "wb") as fh:
            fh.write(bytes(range(256)) * 4096)
            fh.flush()
            os.fsync(fh.fileno())
        """))
    check_v2_shape(trace)
    assert os.path.getsize(f) == 1 * MiB
    assert f not in trace.paths()


def test_without_used_output_stays_version_1(data_dir, tmp_path):
    f = os.path.join(data_dir, "v1.bin")
    write_file(f, 1 * MiB)
    evict(f)
    log = tmp_path / "v1.log"
    proc = subprocess.run([TRACE, "-o", str(log), "-c", f"cat {f} >/dev/null"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    trace = Trace(text)
    assert trace.header["pagetrace-format"] == "1"
    assert trace.header["columns"] == "timestamp_us path offset"
    assert "records" not in trace.header
    assert not trace.header["tracer"].endswith("used)")
    assert set(trace.trailer) == {"pages", "bytes", "files", "duration_us", "lost", "metadata",
                                  "bpf_ns", "bpf_runs", "bpf_missed"}
    assert all(len(r[3]) == 0 for r in trace.records)
    assert trace.page_set(f) == cached_since_eviction(f)


def test_full_page_state_map_is_lost_not_silent(data_dir, tmp_path):
    f = os.path.join(data_dir, "many.bin")
    write_file(f, 4 * MiB)  # 16 chunks of 64 pages
    evict(f)
    trace, proc, _ = run_used(tmp_path, "--page-states", "4", "-c", f"cat {f} >/dev/null",
                              check_rc=3)
    assert int(trace.trailer["lost"]) > 0
    assert "page state map full" in proc.stderr
    assert "LOST" in proc.stderr


def test_c_reader_reads_the_output(data_dir, tmp_path):
    assert os.access(DUMP, os.X_OK), "replay/.output/tracefile-dump is not built: run make"
    f = os.path.join(data_dir, "dump.bin")
    write_file(f, 2 * MiB)
    evict(f)
    trace, _, log = run_used(tmp_path, "-x", "--", "sh", "-c", f"head -c 100000 {f} >/dev/null")
    dumped = subprocess.run([DUMP, str(log)], capture_output=True, text=True)
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stderr == ""
    parsed = json.loads(dumped.stdout)
    assert parsed["version"] == 2
    assert len(parsed["records"]) == len(trace.records)
    kinds = [r[3][0] for r in parsed["records"]]
    assert kinds == [r[3][0] for r in trace.records]
    assert "access" in kinds and "read" in kinds


def test_one_big_read_call(data_dir, tmp_path):
    """One read() of a whole file: thousands of batches, one access per page."""
    f = os.path.join(data_dir, "big.bin")
    write_file(f, 32 * MiB)
    evict(f)
    trace, _, _ = run_used(tmp_path, *python_cmd(f"""
        import os
        fd = os.open({f!r}, os.O_RDONLY)
        assert len(os.read(fd, {64 * MiB})) == {32 * MiB}
        """))
    check_v2_shape(trace)
    assert sorted(trace.kind_pages(f, "access")) == list(range(32 * MiB // PAGE))
    assert trace.kind_set(f, "read") == cached_since_eviction(f)


# --- a read batch that ends on a page still being read ------------------

IN_FLIGHT_PAGES = 16
IN_FLIGHT_RBPS = "16K"		# 64 KiB in about 4 s

# One call reading bytes [0, n) of fd, each of the read family.
READ_CALLS = {
    "pread": "assert len(os.pread(fd, n, 0)) == n",
    "read": "assert len(os.read(fd, n)) == n",
    "readv": "assert os.readv(fd, [bytearray(n // 2), bytearray(n // 2)]) == n",
    "preadv": "assert os.preadv(fd, [bytearray(n // 4), bytearray(3 * n // 4)], 0) == n",
    # preadv2 with offset -1 reads at the file position, as readv does.
    "preadv2": "vec = (ctypes.c_char * n)(); iov = (ctypes.c_void_p * 2)(ctypes.addressof(vec), n); "
               "libc = ctypes.CDLL(None, use_errno=True); libc.preadv2.argtypes = "
               "[ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_int]; "
               "assert libc.preadv2(fd, iov, 1, -1, 0) == n",
}


def _put_in_flight_when_ready(ready, go, start_read):
    """Waits for the traced program's word on the fifo READY (it runs: the
    tool is attached), calls start_read(), then lets it go on the fifo GO.
    Without the word (the program never ran), returns at READY's end."""
    with open(ready, "rb") as r:
        if r.read(1) != b"r":
            return
    start_read()
    with open(go, "wb") as g, contextlib.suppress(BrokenPipeError):
        g.write(b"g")


@contextlib.contextmanager
def batch_ending_in_flight(data_dir, tmp_path, call="pread"):
    """A file whose pages [0, 16) are cached (and held), [16, 32) being read
    (POSIX_FADV_WILLNEED from this process, held by blk-throttle for about 4
    s), and a program that reads [0, 32) in one pread. Its first batch is
    pages 0-15 and the locked page 16: filemap_get_pages() returns 0-15
    through its error path, without mm_filemap_get_pages. The WILLNEED is
    issued when the program says it runs (under the tool, so however long
    the tool took to attach), and the program reads once it is issued. The
    program writes how long its pread waited to WAITED; more than a few
    tenths of a second proves the pages were in flight. It also writes the
    bytes it submitted for reading during the call (the kernel's count,
    read_bytes of /proc/self/io): none, unless something reclaimed a page of
    [16, 32) between its read and the program's (DAMON pages out cold page
    cache here). Yields (path, program, report), REPORT being that file's
    path; the tools run outside the cgroup, the read it holds was not
    theirs."""
    f = os.path.join(data_dir, "in-flight.bin")
    report = tmp_path / "in-flight-report.json"
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(ready)
    os.mkfifo(go)
    write_file(f, 4 * IN_FLIGHT_PAGES * PAGE)
    evict(f)
    fd = os.open(f, os.O_RDONLY)
    waiter = None
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)   # no readahead: exactly 0-15
        os.pread(fd, IN_FLIGHT_PAGES * PAGE, 0)
        program = textwrap.dedent(f"""
            import ctypes, json, os, time
            def read_bytes():
                with open("/proc/self/io") as io:
                    return int(dict(line.split(": ") for line in io)["read_bytes"])
            fd = os.open({f!r}, os.O_RDONLY)
            n = {2 * IN_FLIGHT_PAGES * PAGE}
            with open({str(ready)!r}, "wb") as r:
                r.write(b"r")
            with open({str(go)!r}, "rb") as g:
                assert g.read(1) == b"g"
            before, start = read_bytes(), time.monotonic()
            {READ_CALLS[call]}
            waited, after = time.monotonic() - start, read_bytes()
            open({str(report)!r}, "w").write(json.dumps({{"waited": waited,
                                                         "read_bytes": after - before}}))
            """)
        limits = throttle.parse_limits(f"riops=1000,rbps={IN_FLIGHT_RBPS}")
        with locked_in_cache(f, IN_FLIGHT_PAGES * PAGE):
            assert resident_pages(f) == set(range(IN_FLIGHT_PAGES))
            with throttle.Cgroup(limits, throttle.disks_of([f]), "test") as cgroup:
                def start_read():
                    with cgroup.spawning():
                        os.posix_fadvise(fd, IN_FLIGHT_PAGES * PAGE, IN_FLIGHT_PAGES * PAGE,
                                         os.POSIX_FADV_WILLNEED)
                waiter = threading.Thread(target=_put_in_flight_when_ready,
                                          args=(ready, go, start_read), daemon=True)
                waiter.start()
                yield f, program, report
                assert cgroup.counts()[1] >= IN_FLIGHT_PAGES * PAGE
    finally:
        if waiter and waiter.is_alive():
            # The program stopped before its word or before its go: the
            # fifo's other end, opened and closed, frees the waiter.
            for fifo, flags in ((ready, os.O_WRONLY), (go, os.O_RDONLY)):
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, flags | os.O_NONBLOCK))
            waiter.join(10)
        os.close(fd)
    assert json.loads(report.read_text())["waited"] > 0.3, "the pages were not in flight"


@pytest.mark.parametrize("call", sorted(READ_CALLS))
def test_batch_returned_without_its_tracepoint(data_dir, tmp_path, call):
    with batch_ending_in_flight(data_dir, tmp_path, call) as (f, program, report):
        trace, _, _ = run_used(tmp_path, "--", sys.executable, "-c", program)
    check_v2_shape(trace)
    # Every page of the pread is an access, the cached ones too. The program
    # read from storage exactly what the kernel counted it submitting:
    # nothing, unless a page of [16, 32) was reclaimed before it got there
    # (a CI run once saw pages 31-63 read so, and the old assertion of no
    # read at all could not tell that from a tracer's error).
    assert trace.kind_set(f, "access") == set(range(2 * IN_FLIGHT_PAGES))
    assert len(trace.kind_set(f, "read")) * PAGE == json.loads(report.read_text())["read_bytes"]


# --- reads held by blk-throttle -----------------------------------------

def trace_v1(log, *command, options=("-x",)):
    """trace OPTIONS (by default -x: pid tid comm cause dev ino after the
    offset) of COMMAND (-c SHELL-COMMAND, or -- ARGV...)."""
    proc = subprocess.run([TRACE, *options, "-o", str(log), *command], capture_output=True,
                          text=True, errors="surrogateescape", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return Trace(log.read_text(errors="surrogateescape"))


def causes(trace, path):
    """(comm, cause) of PATH's records."""
    return {(extra[2], extra[3]) for _, p, _, extra in trace.records if p == path}


@contextlib.contextmanager
def slow_cgroup_and_cold_file(data_dir, name):
    """A cold 1 MiB file and a cgroup that reads it at 512 KiB/s; yields
    (path, cgroup), and checks that the limit applied to its reads."""
    f = os.path.join(data_dir, name)
    write_file(f, 1 * MiB)
    evict(f)
    limits = throttle.parse_limits("riops=1000,rbps=512K")
    with throttle.Cgroup(limits, throttle.disks_of([f]), "test") as cgroup:
        yield f, cgroup
        assert cgroup.counts()[1] >= 1 * MiB


def test_reads_held_by_blk_throttle_are_credited(data_dir, tmp_path):
    """blk-throttle's worker submits the bios it held: they are the traced
    command's when they are its cgroup's (cause '-', no thread to ask)."""
    with slow_cgroup_and_cold_file(data_dir, "throttled.bin") as (f, cgroup):
        with cgroup.spawning():
            trace = trace_v1(tmp_path / "t.log", "-c", f"cat {f} > /dev/null")
    assert trace.page_set(f) == cached_since_eviction(f)
    # Some bios were held and credited: submitted by a kworker, cause '-'.
    assert any(comm.startswith("kworker") and cause == "-" for comm, cause in causes(trace, f))


def test_held_reads_of_a_command_without_a_shell_are_credited(data_dir, tmp_path):
    """Without -x the thread's own programs are few: the command's first
    read may be held before any of them ran. Its exec notes its cgroup."""
    with slow_cgroup_and_cold_file(data_dir, "direct.bin") as (f, cgroup):
        with cgroup.spawning():
            trace = trace_v1(tmp_path / "t.log", "--", "cat", f, options=())
    assert trace.page_set(f) == cached_since_eviction(f)


def test_throttled_reads_of_another_cgroup_are_not_credited(data_dir, tmp_path):
    with slow_cgroup_and_cold_file(data_dir, "theirs.bin") as (f, cgroup):
        with cgroup.spawning():
            other = subprocess.Popen(["sh", "-c", f"sleep 0.5; cat {f} > /dev/null"])
        trace = trace_v1(tmp_path / "t.log", "-c", "sleep 3")
        assert other.wait(timeout=30) == 0
    assert trace.page_set(f) == set()

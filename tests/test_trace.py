"""tracer/trace against the page cache itself.

Each workload runs under trace on files evicted beforehand; the pages that
trace reports for a file must equal the pages that became resident
(mincore before and after). Files live on a loop-mounted ext4 image so that
nothing else on the machine touches them.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import loopimg
from conftest import REPO, output_beside_read, require_root, wait_ready
from trace_oracle import Trace
from pagecache_util import PAGE, cached_since_eviction, cold_file, evict, resident_pages, write_file

TRACE = os.path.join(REPO, "tracer", "trace")
MiB = 1 << 20


def run_trace(*args, check_rc=0, timeout=120, **kw):
    require_root()
    assert os.access(TRACE, os.X_OK), "tracer/trace is not built: run make"
    proc = subprocess.run([TRACE, *args], capture_output=True, text=True,
                          errors="surrogateescape", timeout=timeout, **kw)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def traced(*args, **kw):
    proc = run_trace(*args, **kw)
    return Trace(proc.stdout), proc


def python_cmd(code):
    return ["--", sys.executable, "-c", textwrap.dedent(code)]


@pytest.fixture
def data_dir(ext4_image, request):
    path = os.path.join(ext4_image, request.node.name.replace("[", "_").replace("]", ""))
    os.makedirs(path, exist_ok=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def assert_trace_matches_cache(trace, path):
    """The central property: traced pages == pages that became resident
    (counting those the kernel has reclaimed again since, by shadow entry)."""
    resident = cached_since_eviction(path)
    traced_pages = trace.pages(path)
    assert resident, f"workload read nothing from {path}"
    # A page reclaimed during the workload is read again, legitimately; but
    # one read (one bio, one timestamp) must report each page once.
    reads = [(ts, offset) for ts, p, offset, _ in trace.records if p == path]
    assert len(reads) == len(set(reads)), "a page was reported twice for one read"
    assert set(traced_pages) == resident, (
        f"only traced: {sorted(set(traced_pages) - resident)[:10]}, "
        f"only resident: {sorted(resident - set(traced_pages))[:10]}")


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp"])
def test_sequential_read(data_dir, attach):
    f = cold_file(data_dir, "seq.bin", 8 * MiB)
    trace, _ = traced("--attach", attach, "--", "dd", f"if={f}", "of=/dev/null", "bs=64k")
    assert trace.header["tracer"].endswith(f"{attach}, bpf_loop)")
    assert_trace_matches_cache(trace, f)
    assert trace.page_set(f) == set(range(8 * MiB // PAGE))
    # Offsets come out in read order for a sequential read.
    assert trace.pages(f) == sorted(trace.pages(f))


def test_scattered_preads_with_holes(data_dir):
    # The 2011 experiment: 64 KiB at 0 and 64 KiB at 512 KiB of a 1 MiB
    # file, 100,000 times; only the first of each can miss the cache.
    f = cold_file(data_dir, "holes.bin", 1 * MiB)
    trace, _ = traced(*python_cmd(f"""
        import os
        fd = os.open({f!r}, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for _ in range(100000):
            os.pread(fd, 65536, 0)
            os.pread(fd, 65536, 524288)
        """))
    assert_trace_matches_cache(trace, f)
    # With readahead disabled by FADV_RANDOM, exactly the two windows.
    assert trace.page_set(f) == set(range(16)) | set(range(128, 144))


def test_mmap_random_touches(data_dir):
    f = cold_file(data_dir, "mapped.bin", 16 * MiB)
    trace, _ = traced("-x", *python_cmd(f"""
        import mmap, os, random
        fd = os.open({f!r}, os.O_RDONLY)
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        m.madvise(mmap.MADV_RANDOM)
        rng = random.Random(7)
        for page in rng.sample(range({16 * MiB // PAGE}), 200):
            m[page * {PAGE}]
        """))
    assert_trace_matches_cache(trace, f)
    assert len(trace.page_set(f)) == 200
    causes = {r[3][3] for r in trace.records if r[1] == f}
    assert causes == {"fault"}


def test_exec_of_a_binary(data_dir):
    binary = os.path.join(data_dir, "tool")
    shutil.copy(TRACE, binary)  # any sizeable ELF will do
    os.chmod(binary, 0o755)
    evict(binary)
    trace, _ = traced("--", binary, "--help")
    assert_trace_matches_cache(trace, binary)


def test_grandchild_through_sh(data_dir):
    f = cold_file(data_dir, "deep.bin", 256 * 1024)
    trace, _ = traced("-x", "-c", f"sh -c 'cat {f} > /dev/null; true'; true")
    assert_trace_matches_cache(trace, f)
    pids = {r[3][0] for r in trace.records if r[1] == f}
    assert len(pids) == 1 and int(pids.pop()) != 0


def test_writing_a_new_file_records_nothing(data_dir):
    f = os.path.join(data_dir, "written.bin")
    trace, _ = traced("--", "dd", "if=/dev/zero", f"of={f}", "bs=4k", "count=100",
                      "conv=fsync", "status=none")
    assert os.path.getsize(f) == 100 * PAGE
    assert trace.pages(f) == []
    # Appending and fallocate are writes too.
    trace, _ = traced("-c", f"head -c 409600 /dev/zero >> {f} && fallocate -o 819200 -l 409600 {f}")
    assert trace.pages(f) == []


def test_tmpfs_file_records_nothing(tmpfs_dir):
    f = os.path.join(tmpfs_dir, "in-memory.bin")
    write_file(f, 1 * MiB)
    trace, _ = traced("--", "md5sum", f)
    assert trace.pages(f) == []


def test_page_cache_hits_record_nothing(data_dir):
    f = cold_file(data_dir, "hot.bin", 1 * MiB)
    with open(f, "rb") as fh:
        fh.read()
    trace, _ = traced("--", "md5sum", f)
    assert trace.pages(f) == []


def test_odirect_records_nothing(data_dir):
    f = cold_file(data_dir, "direct.bin", 1 * MiB)
    trace, _ = traced("--", "dd", f"if={f}", "of=/dev/null", "bs=64k", "iflag=direct",
                      "status=none")
    assert trace.pages(f) == []
    assert resident_pages(f) == set()


def test_space_and_newline_in_name(data_dir):
    f = cold_file(data_dir, "a name with space\nand newline\\ \t.bin", 64 * 1024)
    proc = run_trace("--", "cat", f)
    record = [line for line in proc.stdout.splitlines() if not line.startswith("#")][0]
    assert "\\040" in record and "\\012" in record and "\\134" in record
    assert_trace_matches_cache(Trace(proc.stdout), f)


def test_deleted_file(data_dir):
    f = cold_file(data_dir, "doomed.bin", 64 * 1024)
    trace, _ = traced(*python_cmd(f"""
        import os
        fd = os.open({f!r}, os.O_RDONLY)
        os.unlink({f!r})
        os.read(fd, 65536)
        """))
    assert trace.page_set("//deleted" + f) == set(range(16))


def test_large_folios_are_expanded(data_dir):
    f = cold_file(data_dir, "big.bin", 64 * MiB)
    trace, _ = traced("--", "dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none")
    assert_trace_matches_cache(trace, f)
    assert trace.page_set(f) == set(range(64 * MiB // PAGE))
    assert trace.trailer["pages"] == str(len(trace.records))
    assert trace.trailer["lost"] == "0"


def test_header_and_trailer(data_dir):
    f = cold_file(data_dir, "small.bin", 3 * PAGE)
    trace, proc = traced("--", "cat", f)
    h = trace.header
    assert h["pagetrace-format"] == "1" and h["page-size"] == str(PAGE)
    assert h["clock"] == "realtime-us"
    assert h["columns"] == "timestamp_us path offset"
    assert h["command"] == "cat\\040" + f.replace(" ", "\\040")
    assert h["kernel"] == os.uname().release
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", h["start"])
    t = trace.trailer
    assert int(t["pages"]) == len(trace.records)
    assert int(t["bytes"]) == PAGE * len(trace.records)
    assert int(t["files"]) == len(trace.paths())
    assert t["lost"] == "0"
    # Timestamps are wall-clock microseconds of this run.
    now_us = time.time() * 1e6
    assert all(now_us - 120e6 < ts <= now_us for ts, *_ in trace.records)
    assert "0 lost" in proc.stderr


def test_extra_columns(data_dir):
    f = cold_file(data_dir, "extra.bin", 4 * PAGE)
    trace, _ = traced("-x", "--", "cat", f)
    assert trace.header["columns"] == "timestamp_us path offset pid tid comm cause dev ino"
    st = os.stat(f)
    for _, path, _, extra in trace.records:
        assert len(extra) == 6
    pid, tid, comm, cause, dev, ino = [r[3] for r in trace.records if r[1] == f][0]
    assert comm == "cat" and pid == tid
    assert cause in {"sync_ra", "read"}
    assert dev == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}" and ino == str(st.st_ino)


def test_exit_status_is_the_commands():
    assert run_trace("-c", "exit 7", check_rc=None).returncode == 7
    assert run_trace("--", "sh", "-c", "kill -TERM $$", check_rc=None).returncode == 128 + 15


def test_lost_events_are_never_silent(data_dir):
    # A 4 KiB ring buffer cannot hold a single path event (> 8 KiB), so every
    # name is lost: trace must say so on stderr, in the trailer and in its
    # exit status, and the records fall back to //unknown paths.
    f = cold_file(data_dir, "lossy.bin", 64 * 1024)
    proc = run_trace("--ringbuf-size", "4K", "--", "cat", f, check_rc=3)
    trace = Trace(proc.stdout)
    assert int(trace.trailer["lost"]) >= 1
    assert "LOST" in proc.stderr
    st = os.stat(f)
    unknown = f"//unknown/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/{st.st_ino}"
    assert trace.page_set(unknown) == set(range(16))
    evict(f)
    proc = run_trace("--allow-lost", "--ringbuf-size", "4K", "--", "cat", f, check_rc=0)
    assert int(Trace(proc.stdout).trailer["lost"]) >= 1


def test_pid_mode_follows_a_running_process(data_dir):
    f = cold_file(data_dir, "late.bin", 128 * 1024)
    r, w = os.pipe()
    target = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, threading
        os.read({r}, 1)
        # a thread and a child, both started after trace attached
        t = threading.Thread(target=lambda: open({f!r}, 'rb').read(65536))
        t.start(); t.join()
        subprocess.run(['tail', '-c', '65536', {f!r}], stdout=subprocess.DEVNULL)
        """)], pass_fds=(r,))
    tracer = subprocess.Popen([TRACE, "-p", str(target.pid)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    wait_ready(tracer, "trace")
    os.write(w, b"g")
    out, err = tracer.communicate(timeout=60)
    target.wait()
    assert tracer.returncode == 0, err
    assert_trace_matches_cache(Trace(out), f)
    assert Trace(out).page_set(f) == set(range(32))


def test_no_children(data_dir):
    f = cold_file(data_dir, "child-only.bin", 64 * 1024)
    trace, _ = traced("--no-children", "--", "sh", "-c", f"cat {f} >/dev/null; true")
    assert trace.pages(f) == []
    evict(f)
    trace, _ = traced("--", "sh", "-c", f"cat {f} >/dev/null; true")
    assert trace.page_set(f) == set(range(16))


def test_system_wide(data_dir):
    f = cold_file(data_dir, "anyone.bin", 64 * 1024)
    status, out, err = output_beside_read([TRACE, "-a", "-d", "4"], "trace", f, 60)
    assert status == 0, err
    assert Trace(out).page_set(f) == set(range(16))


def test_sigint_writes_the_trailer(data_dir):
    tracer = subprocess.Popen([TRACE, "-a"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    wait_ready(tracer, "trace")
    tracer.send_signal(signal.SIGINT)
    out, err = tracer.communicate(timeout=30)
    assert tracer.returncode == 0, err
    assert Trace(out).trailer is not None


def test_runs_as_sudo_user_and_dash_u():
    # The command's stdout goes to stderr, so that it never mixes with the trace.
    proc = run_trace("--user", "nobody", "--", "id", "-u")
    assert proc.stderr.splitlines()[0] == "65534"
    assert Trace(proc.stdout).trailer is not None
    env = dict(os.environ, SUDO_UID="65534", SUDO_GID="65534")
    proc = run_trace("--", "id", "-u", env=env)
    assert proc.stderr.splitlines()[0] == "65534"


def test_command_output_with_dash_o(tmp_path):
    out = tmp_path / "reads.log"
    proc = run_trace("-o", str(out), "--", "echo", "hello")
    assert proc.stdout == "hello\n"


def test_output_file_option(tmp_path):
    out = tmp_path / "reads.log"
    proc = run_trace("-o", str(out), "--", "true")
    assert proc.stdout == ""
    assert out.read_text().startswith("# pagetrace-format: 1\n")
    assert out.read_text().splitlines()[-1].startswith("# end: pages=")


@pytest.mark.parametrize("args, message", [
    ([], "nothing to trace"),
    (["-p", "1", "-c", "true"], "exclusive"),
    (["-c", "true", "--", "true"], "not both"),
    (["-a", "--no-children"], "makes no sense"),
    (["--ringbuf-size", "1000", "-a"], "power of two"),
    (["-p", "999999999"], "trace: -p: 999999999: no such process"),
    (["--attach", "kprobe", "-a"], "auto, tp_btf or raw_tp"),
])
def test_bad_options(args, message):
    proc = run_trace(*args, check_rc=None, timeout=30)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert proc.stderr.startswith("trace: ") or "trace:" in proc.stderr


def test_clear_error_without_privileges():
    require_root()
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           TRACE, "--", "true"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "run as root, or with CAP_BPF and CAP_PERFMON" in proc.stderr


READPAGE = os.path.join(REPO, "tracer", "readpage")

WORKLOADS = {
    "sequential": "open({f!r}, 'rb').read()",
    "scattered": """
import os
fd = os.open({f!r}, os.O_RDONLY)
for off in (0, 3 << 20, 1 << 20, 7 << 20, 5 << 20):
    os.pread(fd, 65536, off)
""",
    "mmap": """
import mmap, os, random
m = mmap.mmap(os.open({f!r}, os.O_RDONLY), 0, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)
for page in random.Random(3).sample(range(2048), 64):
    m[page * 4096]
""",
}


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_readpage_bt_records_the_same_pages(data_dir, workload):
    require_root()
    f = os.path.join(data_dir, "both.bin")
    write_file(f, 8 * MiB)
    script = os.path.join(data_dir, "workload.py")
    with open(script, "w") as fh:
        fh.write(textwrap.dedent(WORKLOADS[workload]).format(f=f))
    evict(f)
    by_trace, _ = traced("--", sys.executable, script)
    assert_trace_matches_cache(by_trace, f)
    evict(f)
    # Through tracer/readpage, which mounts tracefs privately where it is
    # absent (a fresh machine) and pipes bpftrace into resolve-inodes.
    resolved = subprocess.run([READPAGE, "-c", f"{sys.executable} {script}"],
                              capture_output=True, timeout=120)
    assert resolved.returncode == 0, resolved.stderr.decode(errors="replace")
    by_bt = Trace(resolved.stdout.decode("utf-8", "surrogateescape"))
    assert by_bt.header["pagetrace-format"] == "1"
    assert by_bt.trailer["lost"] == "0"
    assert by_bt.page_set(f) == by_trace.page_set(f)
    assert len(by_bt.page_set(f)) > 0


# The thread's read context lives in task-local storage made at its first
# event: from traced_tids (-c, either attach mode), or for every thread (-a).
@pytest.mark.parametrize("mode", [[], ["--attach", "raw_tp"], ["-a"]])
def test_cause_column(data_dir, mode):
    seq = os.path.join(data_dir, "seq-cause.bin")
    willneed = os.path.join(data_dir, "willneed.bin")
    write_file(seq, 8 * MiB)
    write_file(willneed, 1 * MiB)
    evict(seq, willneed)
    trace, _ = traced("-x", *mode, *python_cmd(f"""
        import os
        with open({seq!r}, 'rb', buffering=0) as f:
            while f.read(65536):
                pass
        fd = os.open({willneed!r}, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        """))
    seq_causes = [r[3][3] for r in trace.records if r[1] == seq]
    # The first window is synchronous; the rest is read ahead asynchronously
    # as the reader hits each PG_readahead marker.
    assert seq_causes[0] == "sync_ra"
    assert "async_ra" in seq_causes
    assert set(seq_causes) <= {"sync_ra", "async_ra"}
    assert {r[3][3] for r in trace.records if r[1] == willneed} == {"forced_ra"}
    assert trace.page_set(willneed) == set(range(256))


def test_missing_kernel_features_are_named():
    # A BTF without the kernel's tracepoint types stands in for an old kernel:
    # the tracer's own BPF object carries BTF, but no btf_trace_* typedefs.
    bpf_object = os.path.join(REPO, "tracer", ".output", "trace.bpf.o")
    proc = run_trace("-x", "--btf", bpf_object, "--", "true", check_rc=1)
    for group_and_name in ("block:block_bio_queue", "sched:sched_process_fork",
                           "sched:sched_process_exit"):
        assert f"kernel lacks tracepoint {group_and_name}, which pagetrace needs" in proc.stderr
    assert "readahead:page_cache_sync_ra; the cause column will be '-'" in proc.stderr
    assert proc.stdout == ""
    # Without -x there is no cause column, and no word about its tracepoints.
    proc = run_trace("--btf", bpf_object, "--", "true", check_rc=1)
    assert "kernel lacks tracepoint block:block_bio_queue, which pagetrace needs" in proc.stderr
    assert "cause column" not in proc.stderr
    proc = run_trace("--btf", "/nonexistent/vmlinux", "--", "true", check_rc=1)
    assert "trace: --btf: /nonexistent/vmlinux: No such file or directory\n" == proc.stderr
    # The running kernel's own BTF, given explicitly, works like the default.
    trace, _ = traced("--btf", "/sys/kernel/btf/vmlinux", "--", "true")
    assert trace.trailer["lost"] == "0"


@pytest.mark.parametrize("fstype", ["xfs", "btrfs"])
def test_other_filesystems(fstype):
    # iomap (xfs) and btrfs build their read bios differently from ext4;
    # the traced pages and the name must come out the same.
    require_root()
    with loopimg.loop_mount(fstype, size_mib=512) as (mountpoint, _):
        directory = os.path.join(mountpoint, "dir with space")
        os.makedirs(directory)
        f = cold_file(directory, "file.bin", 4 * MiB)
        trace, _ = traced("--", "md5sum", f)
        assert_trace_matches_cache(trace, f)
        assert trace.page_set(f) == set(range(4 * MiB // PAGE))


@pytest.mark.parametrize("attach", ["tp_btf", "raw_tp"])
def test_bio_walk_without_bpf_loop(data_dir, attach):
    # Kernels before 5.17 lack bpf_loop and get a bounded loop instead;
    # force it here. The result must be the same, with nothing lost.
    f = cold_file(data_dir, "unrolled.bin", 16 * MiB)
    trace, _ = traced("--no-bpf-loop", "--attach", attach, "--",
                      "dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none")
    assert trace.header["tracer"].endswith(f"{attach}, unrolled)")
    assert trace.trailer["lost"] == "0"
    assert_trace_matches_cache(trace, f)
    assert trace.page_set(f) == set(range(16 * MiB // PAGE))


def cold_small_files(directory, count):
    """COUNT files of 100 bytes, written back and evicted; their paths."""
    paths = [os.path.join(directory, f"n{i:03}") for i in range(count)]
    for p in paths:
        with open(p, "wb") as f:
            f.write(b"x" * 100)
    subprocess.run(["sync"], check=True)
    for p in paths:
        evict(p)
    return paths


def test_names_not_used_lately_are_forgotten_and_sent_again(data_dir):
    # Long -a runs keep memory bounded by forgetting names not used since
    # the last look (--names-kept, here 100 instead of 65536); the kernel
    # sends a forgotten name again before the file's next record.
    paths = cold_small_files(data_dir, 600)
    code = f"""
        import os, time
        def read(names):
            for p in names:
                with open(p, "rb") as f:
                    f.read()
            time.sleep(0.5)          # trace's poll loop looks at its names
        paths = {paths!r}
        read(paths[:300])
        read(paths[300:])            # paths[:300] are forgotten now
        for p in paths[:100]:
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        read(paths[:100])            # read again: names sent again
        """
    trace, proc = traced("--names-kept", "100", *python_cmd(code))
    mine = [r for r in trace.records if r[1].startswith(data_dir)]
    assert {r[1] for r in mine} == set(paths)
    assert not [r for r in trace.records if r[1].startswith("//unknown")]
    counts = {p: sum(1 for r in mine if r[1] == p) for p in paths}
    assert counts == {p: 2 if p in paths[:100] else 1 for p in paths}
    assert "file names not used lately were forgotten" in proc.stderr
    # files= counts each file once, forgotten or not (devices are not files).
    assert int(trace.trailer["files"]) == len({r[1] for r in trace.records
                                               if not r[1].startswith("/dev/")})


def test_a_forgotten_name_is_sent_again_on_the_same_cpu(data_dir):
    # The kernel side remembers, per CPU, the file it last found named (no
    # lookup for a run of records of one file). When trace forgets names it
    # must void that memory too: here the forgotten file is the last one
    # named on CPU 0 (the other files are read on CPU 1), and is read again
    # on CPU 0.
    paths = cold_small_files(data_dir, 300)
    last = paths[149]
    code = f"""
        import os, time
        def read(names, cpu):
            os.sched_setaffinity(0, {{cpu}})
            for p in names:
                with open(p, "rb") as f:
                    f.read()
            time.sleep(0.5)          # trace's poll loop looks at its names
        paths = {paths!r}
        read(paths[:150], 0)
        read(paths[150:], 1)         # paths[:150] are forgotten now
        os.sched_setaffinity(0, {{0}})
        fd = os.open({last!r}, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.pread(fd, 100, 0)
        os.close(fd)
        """
    trace, proc = traced("--names-kept", "100", *python_cmd(code))
    assert "file names not used lately were forgotten" in proc.stderr
    assert not [r for r in trace.records if r[1].startswith("//unknown")]
    assert sum(1 for r in trace.records if r[1] == last) == 2

"""The kernel matrix's checks, guest side: runs the workloads under the tools
inside the booted kernel and writes what happened to a JSON file, for
tests/test_kernels.py to assert on, on the host.

Standard library only (the guest runs under qemu's TCG, where CPU-bound
Python is about 9x slower than on the host): it measures, it never judges.
For each check it records each tool run (argv, exit status, stdout, stderr)
and the kernel's ground truth taken right after: the pages in the page cache
(mincore; plus reclaimed ones by shadow entry where cachestat(2) exists) and
the sectors the loop device read (/proc/diskstats). The definitions are the
suite's own: tests/pagecache_util.py and tests/loopimg.py.

The randomized ground truth (tests/cachefuzz.py, docs/tracer.md) runs
here too, as the checks cachefuzz_ext4 and cachefuzz_xfs: `cachefuzz.py
run` on its own zram devices, its report and traces beside --out; the host
compares them (tests/cachefuzz_check.py).

    guest_checks.py --tools DIR --out FILE [--only CHECK...] [--fuzz-seeds FIRST COUNT]
"""
import argparse
import contextlib
import hashlib
import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
import traceback

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)
import cachefuzz  # noqa: E402
import loopimg  # noqa: E402
from pagecache_util import (PAGE, cached_since_eviction, evict, have_cachestat,  # noqa: E402
                            locked_in_cache, resident_pages)

MiB = 1 << 20
READ_AHEAD_KB = 4096          # as tests/test_trace_used.py's big_ra_ext4
SCATTERED = [i * 1500 + 7 for i in range(10)]       # test_trace_cachetools
TOUCHED = [i * 2048 + 100 for i in range(8)]        # 8 MiB apart
PREAD_ROUNDS = 1000           # the host suite's 100,000, cut for TCG
CACHEFUZZ = os.path.join(TESTS, "cachefuzz.py")
# Seeds of the randomized scripts: COUNT from FIRST on ext4, the next COUNT
# on xfs (make test's are 1-100 on both; these are others). The matrix gives
# each kernel a block of its own from FIRST on (test_kernels.fuzz_seeds()).
FUZZ_SEEDS = (1001, 100)
FUZZ_TIMEOUT = 900     # 200 s in a guest on a quiet 2-core host
META_FILES, META_DIRS = 300, 20


def cached_pages(path):
    """Pages cached since evict(): resident, or reclaimed since (by shadow
    entry, where the kernel has cachestat(2); before 6.5, resident only, and
    the run's reclaim counters say whether that was exact)."""
    if have_cachestat():
        return sorted(cached_since_eviction(path))
    return sorted(resident_pages(path))


def khugepaged_activity(since=None):
    """Collapses khugepaged began and bytes it read from storage, since
    SINCE (an earlier return) if given: a check's ground truth counts
    every read, and a collapse reads in khugepaged's own context."""
    now = {"collapses": cachefuzz.collapses(), "read_bytes": cachefuzz.khugepaged_reads()}
    return {k: v - since[k] for k, v in now.items()} if since else now


def uptime():
    """Seconds since boot (/proc/uptime), as the console's printk times count."""
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def reclaimed_so_far():
    """Pages the kernel reclaimed since boot (/proc/vmstat pgsteal_*)."""
    with open("/proc/vmstat") as f:
        return sum(int(v) for k, v in (line.split() for line in f)
                   if k.startswith("pgsteal_"))


# trace loads in about 1 s on the host, 10 or more under TCG; it says
# nothing when it is ready, so the checks that start it in the background wait.
TRACE_LOAD_SECONDS = 20


def cgroup2_root(work):
    """The cgroup2 hierarchy's mount point, or one mounted under WORK."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ")
            if right.split()[0] == "cgroup2" and left.split()[3] == "/":
                return left.split()[4]
    root = os.path.join(work, "cgroup2")
    os.mkdir(root)
    subprocess.run(["mount", "-t", "cgroup2", "none", root], check=True)
    return root


class Checks:
    def __init__(self, tools, work, out_dir=None, fuzz_seeds=FUZZ_SEEDS, env=None):
        self.tools, self.work = tools, work
        self.out_dir, self.fuzz_seeds = out_dir, fuzz_seeds
        self.env = env     # the tools' environment (None: this one)

    def run(self, tool, *args, timeout=180):
        """One run of TOOL (trace, cachetop, cachestat) from the tools
        directory: what the host needs to judge it."""
        return self.execute([os.path.join(self.tools, tool), *args], timeout)

    def execute(self, argv, timeout):
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="surrogateescape",
                                  timeout=timeout, stdin=subprocess.DEVNULL, env=self.env)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", e.stdout or "", f"timed out after {timeout} s"
            out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return {"argv": argv, "rc": rc, "stdout": out, "stderr": err,
                "seconds": round(time.monotonic() - start, 2)}

    def python(self, code):
        return [sys.executable, "-c", textwrap.dedent(code)]

    def file(self, name, size, seed=0, cold=True):
        """A file of SIZE bytes, evicted unless COLD is false. Written in one
        call (pagecache_util.write_file's page-by-page loop takes a minute
        for 64 MiB under TCG); what the pages hold does not matter here."""
        path = os.path.join(self.work, name)
        with open(path, "wb") as f:
            f.write(bytes((seed + i) & 0xff for i in range(256)) * (size // 256))
            f.flush()
            os.fsync(f.fileno())
        if cold:
            evict(path)
        return path

    # --- trace: pages read from storage -----------------------------------

    def trace_cold_cat(self):
        f = self.file("cat.bin", 2 * MiB)
        # trace passes the command's stdout to its stderr: not 2 MiB of it.
        run = self.run("trace", "-x", "-c", f"cat {f} > /dev/null")
        return {"file": f, "runs": [run], "cached": cached_pages(f)}

    def trace_raw_tp_cold_cat(self):
        """The same, with the raw_tp programs (the fallback where tp_btf
        does not load)."""
        f = self.file("cat-raw.bin", 2 * MiB)
        run = self.run("trace", "-x", "--attach", "raw_tp", "-c", f"cat {f} > /dev/null")
        return {"file": f, "runs": [run], "cached": cached_pages(f)}

    def trace_scattered_preads(self):
        f = self.file("holes.bin", 1 * MiB)
        run = self.run("trace", "--", *self.python(f"""
            import os
            fd = os.open({f!r}, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            for _ in range({PREAD_ROUNDS}):
                os.pread(fd, 65536, 0)
                os.pread(fd, 65536, 524288)
            """))
        return {"file": f, "runs": [run], "cached": cached_pages(f)}

    def trace_mmap_faults(self):
        """200 random faults. MADV_NOHUGEPAGE keeps khugepaged off the
        mapping: under THP "always" (Debian's 7.3) its collapse of a 2 MiB
        block reads the block's missing pages in its own context, pages
        cached that no traced task read (1 run in 30 in a 7.3 guest,
        2026-11-28: 492 such pages)."""
        f = self.file("mapped.bin", 16 * MiB)
        before = khugepaged_activity()
        run = self.run("trace", "-x", "--", *self.python(f"""
            import mmap, os, random
            fd = os.open({f!r}, os.O_RDONLY)
            m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            m.madvise(mmap.MADV_RANDOM)
            m.madvise(mmap.MADV_NOHUGEPAGE)
            for page in random.Random(7).sample(range({16 * MiB // PAGE}), 200):
                m[page * {PAGE}]
            """))
        return {"file": f, "runs": [run], "cached": cached_pages(f),
                "khugepaged": khugepaged_activity(before)}

    def trace_child_and_grandchild(self):
        f = self.file("deep.bin", 256 * 1024)
        run = self.run("trace", "-x", "-c", f"sh -c 'cat {f} > /dev/null; true'; true")
        return {"file": f, "runs": [run], "cached": cached_pages(f)}

    def trace_lost_events(self):
        f = self.file("lossy.bin", 64 * 1024)
        st = os.stat(f)
        run = self.run("trace", "--ringbuf-size", "4K", "-c", f"cat {f} > /dev/null")
        return {"file": f, "runs": [run], "cached": cached_pages(f),
                "dev": f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", "ino": st.st_ino}

    def trace_cgroup_join(self):
        """trace --cgroup on a cgroup2 cgroup (mounted here if the guest has
        none): a python that joins it after trace attached reads one file,
        a cat outside it another; removing the cgroup ends the trace."""
        inside, outside = self.file("joined.bin", 512 * 1024), self.file("outside.bin", 256 * 1024)
        root = cgroup2_root(self.work)
        cgroup = os.path.join(root, "pagetrace-check")
        os.mkdir(cgroup)
        argv = [os.path.join(self.tools, "trace"), "-x", "--cgroup", cgroup]
        tracer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(TRACE_LOAD_SECONDS)
        subprocess.run(["cat", outside], stdout=subprocess.DEVNULL, check=True)
        subprocess.run(self.python(f"""
            import os
            with open({os.path.join(cgroup, "cgroup.procs")!r}, "w") as f:
                f.write(str(os.getpid()))
            with open({inside!r}, "rb") as f:
                while f.read(65536):
                    pass
            """), check=True)
        os.rmdir(cgroup)
        try:
            out, err = tracer.communicate(timeout=120)
            rc = tracer.returncode
        except subprocess.TimeoutExpired:
            tracer.kill()
            out, err = tracer.communicate()
            rc = "timeout"
        if root.startswith(self.work):
            subprocess.run(["umount", root], check=False)
        return {"file": inside, "outside": outside, "cached": cached_pages(inside),
                "runs": [{"argv": argv, "rc": rc, "stdout": out, "stderr": err}]}

    def trace_metadata_ext4(self):
        """tests/test_trace_metadata.py's check, smaller: a cold ext4 of
        small files, `find | xargs cat`, the device's sectors read."""
        with loopimg.loop_mount("ext4", size_mib=64, mkfs_args=[
                "-q", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0"]) as (mnt, dev):
            loopimg.populate_small_files(mnt, META_FILES, META_DIRS)
            loopimg.run("umount", mnt)
            # ext4lazyinit prefetches block bitmaps after a mount (5.9+):
            # device reads no command makes, which under TCG can land after
            # `before`. Where the option is unknown, a plain mount.
            if loopimg.run("mount", "-o", "no_prefetch_block_bitmaps", dev, mnt,
                           check=False).returncode:
                loopimg.run("mount", dev, mnt)
            before = loopimg.diskstats_field(dev, 5)
            run = self.run("trace", "-x", "-c", f"find {mnt} -type f | xargs cat > /dev/null")
            sectors = loopimg.diskstats_field(dev, 5) - before
            rdev = os.stat(dev).st_rdev
            return {"mount": mnt, "device": dev, "runs": [run], "sectors_read": sectors,
                    "files": META_FILES, "rdev": f"{os.major(rdev)}:{os.minor(rdev)}"}

    # --- readpage (readpage.bt under bpftrace) ----------------------------

    def readpage(self, f, code):
        """tracer/readpage beside the tools: the same workloads as
        tests/test_trace.py's readpage check. --raw: resolve-inodes would
        walk every filesystem read, and in the guest that is the host's
        whole root over 9p; its names are checked on the host's suite."""
        script = os.path.join(self.work, "workload.py")
        with open(script, "w") as fh:
            fh.write(textwrap.dedent(code))
        evict(f)
        st = os.stat(f)
        run = self.run("readpage", "--raw", "-c", f"{sys.executable} {script}")
        return {"file": f, "runs": [run], "cached": cached_pages(f), "ino": st.st_ino,
                "kernel_dev": os.major(st.st_dev) << 20 | os.minor(st.st_dev)}

    def readpage_cold_read(self):
        f = self.file("both.bin", 8 * MiB)
        return self.readpage(f, f"open({f!r}, 'rb').read()\n")

    def readpage_mmap_faults(self):
        f = self.file("both-mapped.bin", 8 * MiB)
        return self.readpage(f, f"""
            import mmap, os, random
            m = mmap.mmap(os.open({f!r}, os.O_RDONLY), 0, prot=mmap.PROT_READ)
            m.madvise(mmap.MADV_RANDOM)
            m.madvise(mmap.MADV_NOHUGEPAGE)   # as trace_mmap_faults
            for page in random.Random(3).sample(range({8 * MiB // PAGE}), 64):
                m[page * {PAGE}]
            """)

    # --- trace --used and cachetop: accesses, hits and misses -------------

    def used(self, command):
        log = os.path.join(self.work, "used.log")
        run = self.run("trace", "--used", "-x", "-o", log, "-c", command)
        run["trace"] = open(log, errors="surrogateescape").read() if os.path.exists(log) else ""
        return run

    def cachetop(self, command):
        return self.run("cachetop", "-j", "-c", command)

    def _cold_and_warm(self, tool, f, command):
        evict(f)
        cold = tool(command)
        cold_cached = cached_pages(f)
        with locked_in_cache(f):
            warm = tool(command)
        return [cold, warm], cold_cached

    def _workload(self, make, command_of):
        """Per tool (used, cachetop): the workload cold, then warm."""
        result = {}
        for tool in ("used", "cachetop"):
            f = make()
            runs, cached = self._cold_and_warm(getattr(self, tool), f, command_of(f))
            result[tool] = {"runs": runs, "cached": cached}
        result["file"] = f
        return result

    def cache_cold_warm_cat(self):
        return self._workload(lambda: self.file("cat8.bin", 8 * MiB, cold=False),
                              lambda f: f"cat {f} > /dev/null")

    def cache_scattered_preads(self):
        return self._workload(lambda: self.file("preads.bin", 64 * MiB, cold=False),
                              lambda f: shlex.join(self.python(f"""
            import os
            fd = os.open({f!r}, os.O_RDONLY)
            for page in {SCATTERED!r}:
                assert len(os.pread(fd, {PAGE}, page * {PAGE})) == {PAGE}
            """)))

    def cache_mmap_touches(self):
        return self._workload(lambda: self.file("touches.bin", 64 * MiB, cold=False),
                              lambda f: shlex.join(self.python(f"""
            import mmap, os
            fd = os.open({f!r}, os.O_RDONLY)
            m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            for page in {TOUCHED!r}:
                m[page * {PAGE}]
            """)))

    def cache_one_cached_one_cold(self):
        result = {}
        for tool in ("used", "cachetop"):
            cached = self.file("cached.bin", 4 * MiB, cold=False)
            cold = self.file("cold.bin", 4 * MiB, seed=3)
            with locked_in_cache(cached):
                run = getattr(self, tool)(f"cat {cached} {cold} > /dev/null")
            result[tool] = {"runs": [run], "cached": cached_pages(cold)}
        result.update(file=cold, cached_file=cached)
        return result

    def cache_write_evict_read(self):
        result = {}
        f = os.path.join(self.work, "written.bin")
        for tool in ("used", "cachetop"):
            if os.path.exists(f):
                os.unlink(f)
            run = getattr(self, tool)(shlex.join(self.python(f"""
                import os
                with open({f!r}, "wb") as fh:
                    fh.write(bytes(range(256)) * {4 * MiB // 256})
                    fh.flush()
                    os.fsync(fh.fileno())
                fd = os.open({f!r}, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                while os.read(fd, 1 << 20):
                    pass
                """)))
            # A tool that refused never ran the command that makes the file.
            result[tool] = {"runs": [run], "cached": cached_pages(f) if os.path.exists(f) else []}
        result["file"] = f
        return result

    def cachestat_cold_read(self):
        """cachestat, system-wide, over one interval while a cold 8 MiB file
        is read again and again: loading takes seconds under TCG, and
        cachestat says nothing when it is ready, so at least one whole cold
        read falls in the interval."""
        f = self.file("stat.bin", 8 * MiB)
        stat = subprocess.Popen([os.path.join(self.tools, "cachestat"), "-j", "10", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)
        while stat.poll() is None:
            evict(f)
            subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)
            time.sleep(0.5)
        out, err = stat.communicate()
        return {"file": f, "runs": [{"argv": stat.args, "rc": stat.returncode, "stdout": out,
                                     "stderr": err}], "cached": cached_pages(f)}


    # --- the randomized ground truth (tests/cachefuzz.py) -----------------

    def cachefuzz(self, fstype, first):
        """`cachefuzz.py run` over COUNT seeds from FIRST on FSTYPE: its
        report and the traces stay in the results' directory, for the host
        to compare (it needs pagetrace waste, from the host's venv)."""
        count = self.fuzz_seeds[1]
        report = os.path.join(self.out_dir, f"cachefuzz-{fstype}.json")
        run = self.execute([sys.executable, CACHEFUZZ, "run", "--seed", str(first),
                            "--count", str(count), "--fs", fstype, "--tools", self.tools,
                            "--json", report], FUZZ_TIMEOUT)
        return {"runs": [run], "fs": fstype, "seeds": [first, first + count - 1],
                "report": os.path.basename(report) if os.path.exists(report) else None}

    # --- the verifier's budget (tests/test_budget.py) -----------------------

    def budget(self):
        """Each program's verified instructions and stack on this kernel, in
        each configuration and attach mode (trace --budget, cachestat --budget:
        loading only, minutes under TCG)."""
        return {"runs": [self.run("trace", "--budget", timeout=900),
                         self.run("cachestat", "--budget", timeout=900)]}

    # --- the tools' self-check (pagetrace doctor, tests/test_self_check.py) --

    def self_check(self):
        """`pagetrace doctor` on this kernel as a user runs it (not
        --strict: what the kernel cannot give is "not available", exit 0),
        its scratch file on the work ext4, the tools from the tools
        directory; loading takes a minute or more under TCG, so its timeout
        and interval are long."""
        analysis = os.path.join(os.path.dirname(TESTS), "analysis")
        return {"runs": [self.execute(
            ["env", f"PYTHONPATH={analysis}", sys.executable, "-m", "pagetrace.tools.doctor",
             "--dir", self.work, "--timeout", "600", "--interval", "5",
             *[a for t in ("trace", "cachestat", "cachetop")
               for a in (f"--{t}-binary", os.path.join(self.tools, t))]], 1800)]}

    # --- how the filemap fallbacks attach -----------------------------------

    def attach_ways(self):
        """What -v says each attach point of trace --used and cachestat
        attached with (attach_choice_print's line)."""
        return {"runs": [self.run("trace", "-v", "--used", "-c", "true"),
                         self.run("cachestat", "-v", "1", "1")]}

    # --- where --used's faults come from ------------------------------------

    def fault_source(self):
        """What -v says trace --used and cachestat attached: the PTE hooks
        (set_pte_range, do_set_pmd) or the fault events, chosen at run
        time (pte_hooks.bpf.h): attach_ways's runs, judged for the source."""
        return self.attach_ways()

    def cachefuzz_ext4(self):
        return self.cachefuzz("ext4", self.fuzz_seeds[0])

    def cachefuzz_xfs(self):
        return self.cachefuzz("xfs", self.fuzz_seeds[0] + self.fuzz_seeds[1])


TRACE_CHECKS = ["trace_cold_cat", "trace_raw_tp_cold_cat", "trace_scattered_preads", "trace_mmap_faults",
                "trace_child_and_grandchild", "trace_metadata_ext4", "trace_lost_events",
                "trace_cgroup_join"]
READPAGE_CHECKS = ["readpage_cold_read", "readpage_mmap_faults"]
CACHE_CHECKS = ["cache_cold_warm_cat", "cache_one_cached_one_cold", "cache_write_evict_read",
                "cache_scattered_preads", "cache_mmap_touches", "cachestat_cold_read"]
FUZZ_CHECKS = ["cachefuzz_ext4", "cachefuzz_xfs"]
BUDGET_CHECKS = ["budget", "fault_source"]
SELF_CHECKS = ["self_check"]
# The filemap fallbacks as kprobes on a kernel that has fentry too: these
# checks again, with PAGETRACE_ATTACH=kprobe (the tools' test knob), and
# the faults from the fault events (PAGETRACE_FAULTS=events), as arm64 6.1
# takes them.
KPROBE = "_kprobe"
KPROBE_CHECKS = [name + KPROBE for name in ["attach_ways", *CACHE_CHECKS, *BUDGET_CHECKS]]
CHECKS = TRACE_CHECKS + READPAGE_CHECKS + CACHE_CHECKS + BUDGET_CHECKS + SELF_CHECKS + FUZZ_CHECKS
# Run where named (tests/kernels/test_kernels.py: KPROBE_ROWS).
ATTACH_CHECKS = ["attach_ways"] + KPROBE_CHECKS


def check_of(checks, name):
    """Check NAME of CHECKS, a KPROBE_CHECKS one with the knob set."""
    if name.endswith(KPROBE):
        checks.env = dict(os.environ, PAGETRACE_ATTACH="kprobe", PAGETRACE_FAULTS="events")
        name = name[:-len(KPROBE)]
    return getattr(checks, name)


def kernel_facts():
    btf = "/sys/kernel/btf/vmlinux"
    facts = {"release": os.uname().release, "btf": os.path.exists(btf),
             "cachestat_syscall": have_cachestat()}
    if facts["btf"]:
        with open(btf, "rb") as f:
            facts["btf_sha256"] = hashlib.sha256(f.read()).hexdigest()
    return facts


@contextlib.contextmanager
def work_areas():
    """A 256 MiB ext4 on a loop device with a large read_ahead_kb (the
    suite's big_ra_ext4), for every check but the metadata one."""
    with loopimg.loop_mount("ext4", size_mib=256) as (mnt, loop):
        with open(f"/sys/block/{os.path.basename(loop)}/queue/read_ahead_kb", "w") as f:
            f.write(str(READ_AHEAD_KB))
        yield mnt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", required=True, help="directory of trace, cachetop, cachestat")
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", default=CHECKS, choices=CHECKS + ATTACH_CHECKS)
    parser.add_argument("--fuzz-seeds", nargs=2, type=int, default=FUZZ_SEEDS,
                        metavar=("FIRST", "COUNT"), help="cachefuzz_*: COUNT seeds from "
                        "FIRST on ext4, the next COUNT on xfs (default %(default)s)")
    args = parser.parse_args()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    results = {"kernel": kernel_facts(), "checks": {}}
    reclaimed = reclaimed_so_far()
    with work_areas() as mnt:
        for name in args.only:
            if name in FUZZ_CHECKS and "pages_reclaimed_during_checks" not in results["kernel"]:
                # The random scripts fill the page cache, and find the pages
                # reclaimed under them themselves: the other checks' count.
                results["kernel"].setdefault("pages_reclaimed_during_checks", reclaimed_so_far() - reclaimed)
            work = os.path.join(mnt, name)
            os.makedirs(work)
            # Written before each check and after the last: a guest the host
            # kills at its timeout still tells which checks finished and
            # which one was running.
            save(args.out, dict(results, running=name))
            start, reclaimed_before = time.monotonic(), reclaimed_so_far()
            try:
                results["checks"][name] = check_of(Checks(args.tools, work, out_dir, args.fuzz_seeds),
                                                   name)()
            except Exception:
                results["checks"][name] = {"error": traceback.format_exc()}
            # For a second boot after a kernel failure (test_kernels.py's
            # run_guest): which checks ended before it, and what they saw
            # reclaimed.
            results["checks"][name].update(
                seconds=round(time.monotonic() - start, 1), uptime_end=uptime(),
                pages_reclaimed=reclaimed_so_far() - reclaimed_before)
            print(f"guest_checks: {name}: {results['checks'][name]['seconds']} s",
                  file=sys.stderr, flush=True)
            loopimg.run("rm", "-rf", work)
    results["kernel"].setdefault("pages_reclaimed_during_checks", reclaimed_so_far() - reclaimed)
    save(args.out, results)


def save(path, results):
    """Replaces PATH with RESULTS whole: the host never reads half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()

"""Inside a guest of the kernel matrix: readpage.stp's cold-read checks,
guest_checks.py's readpage workloads run under tracer/readpage-stap (whose
module the host compiled into the cache) instead of tracer/readpage, with
the same ground truth (mincore, cachestat(2) where the kernel has it), and
what the wrapper leaves behind after a signal (/proc/modules, the
processes of its session), written as JSON for tests/kernels/test_stap.py
to judge on the host.

    stap_guest.py --tools DIR --out FILE [--only CHECK...]
"""
import argparse
import os
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest_checks  # noqa: E402

SIGNAL_CHECKS = ["stap_sigterm", "stap_sigint_to_group", "stap_sigkill"]
CHECKS = guest_checks.READPAGE_CHECKS + SIGNAL_CHECKS
# The traced command while the signal comes: a shell and its child, long
# enough that only the signal can end it within the check.
SLEEPER = "sleep 300 && sleep 300"


def loaded():
    """The readpage_* modules /proc/modules lists."""
    with open("/proc/modules") as f:
        return [line.split()[0] for line in f if line.startswith("readpage_")]


def session_processes(sid):
    """[(pid, comm)] of the processes of session @sid still running."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append((int(pid), comm))
    return found


def wait_for(predicate, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


class StapChecks(guest_checks.Checks):
    def run(self, tool, *args, timeout=300):
        if tool == "readpage":
            tool = "readpage-stap"
        return super().run(tool, *args, timeout=timeout)

    def _traced_sleeper(self):
        """readpage-stap tracing SLEEPER in a session of its own, and
        whether the module got loaded and the command running. --raw: the
        trace's paths are resolved by a walk of the file systems, which
        takes minutes under TCG and is not what these checks time."""
        proc = subprocess.Popen([os.path.join(self.tools, "readpage-stap"), "--raw", "-o",
                                 os.path.join(self.work, "trace.log"), "-c", SLEEPER],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        ready = wait_for(lambda: loaded() and any(
            comm == "sleep" for _, comm in session_processes(proc.pid)), 120)
        return proc, ready

    def _signalled(self, send):
        """What is left after send(proc) signals a traced command's wrapper."""
        proc, ready = self._traced_sleeper()
        start = time.monotonic()
        if ready:
            send(proc)
        try:
            _, err = proc.communicate(timeout=60)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            rc = "timeout"
        left = session_processes(proc.pid)
        for pid, _ in left:
            os.kill(pid, signal.SIGKILL)
        modules = loaded()
        for name in modules:
            subprocess.run(["rmmod", name], check=False)
        return {"ready": ready, "rc": rc, "stderr": err, "left_running": left,
                "modules_after": modules, "seconds": round(time.monotonic() - start, 1)}

    def stap_sigterm(self):
        """SIGTERM to the wrapper alone (as kill(1) or timeout(1) sends it)."""
        return self._signalled(lambda proc: proc.send_signal(signal.SIGTERM))

    def stap_sigint_to_group(self):
        """SIGINT to the wrapper's process group (a terminal's Ctrl-C)."""
        return self._signalled(lambda proc: os.killpg(proc.pid, signal.SIGINT))

    def stap_sigkill(self):
        """SIGKILL to the whole session: the module stays loaded; the next
        run refuses, naming it; the help's command unloads it."""
        proc, ready = self._traced_sleeper()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        left_loaded = loaded()
        again = self.run("readpage", "-c", "true")
        unload = subprocess.run(["sh", "-c", "rmmod $(awk '/^readpage_/ {print $1}' /proc/modules)"],
                                capture_output=True, text=True)
        return {"ready": ready, "left_loaded": left_loaded, "again": again,
                "unload_rc": unload.returncode, "unload_stderr": unload.stderr,
                "modules_after": loaded()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", required=True, help="directory of readpage-stap")
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", default=CHECKS, choices=CHECKS)
    args = parser.parse_args()
    results = {"kernel": guest_checks.kernel_facts(), "checks": {}}
    with guest_checks.work_areas() as mnt:
        for name in args.only:
            work = os.path.join(mnt, name)
            os.makedirs(work)
            start = time.monotonic()
            try:
                results["checks"][name] = getattr(StapChecks(args.tools, work), name)()
            except Exception:
                results["checks"][name] = {"error": traceback.format_exc()}
            results["checks"][name]["seconds"] = round(time.monotonic() - start, 1)
    guest_checks.save(args.out, results)


if __name__ == "__main__":
    main()

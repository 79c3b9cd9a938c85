"""`pagetrace launch`, sorted mode: the pack's pages read in disk order
before CMD starts (on a disk that seeks, all but the read's last lead
seconds, which go on beside CMD), by `replay --sorted --prefetch` (FIEMAP
order) from a list in the trace format written to a memfd. Used by the planner
(tools/launch.py; its `sorted_prefetch_only` is the bench's bound: the
pack's sorted read as the launch plans it, with no command).
Standard library only.
"""
import os
import time

from pagetrace.core import packfile

# The rate of a sorted read is taken from at least this long a stretch of
# it, its progress read from the devices' stat files this often.
MIN_RATE_S = 0.2
POLL_S = 0.02


# ---------------------------------------------------------------------------
# The list replay reads: a trace of format version 1 (docs/trace-format.md).

def list_bytes(ranges, page_size):
    out = [f"# pagetrace-format: 1\n# page-size: {page_size}\n"
           "# command: pagetrace launch prefetch list\n"]
    names = {}
    for path, page, pages in ranges:
        name = names.get(path)
        if name is None:
            name = names[path] = packfile.escape(path)
        out.extend([f"0 {name} {offset * page_size}\n"
                    for offset in range(page, page + pages)])
    return "".join(out).encode("utf-8", "surrogateescape")


def _memfd(data):
    fd = os.memfd_create("pagetrace-launch-list", 0)
    os.write(fd, data)
    return fd


def find_replay(explicit=None):
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    from pagetrace.core.c_tools import find_c_tool
    return find_c_tool("replay")


def run_sorted(replay, fd, max_request):
    """replay --sorted --prefetch before CMD; None, or why it failed."""
    import subprocess
    done = subprocess.run([replay, "--sorted", "--prefetch", "-q",
                           f"--max-request={max_request}",
                           f"/proc/self/fd/{fd}"], pass_fds=(fd,),
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    os.close(fd)
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"replay exited with status {done.returncode}" + (
            f": {lines[-1]}" if lines else "")
    return None


def sorted_prefetch(pack, keep, gap, largest, replay, ahead=None):
    """Reads the kept files' ranges, gaps of up to `gap` pages filled, in
    disk order, in requests of at most `largest` pages; (pages read, None
    or why it failed). The metadata of device nodes first (read_metadata),
    so that replay's opens and FIEMAP find it cached. With `ahead`
    (lead seconds, seeking devices): returns once the read's estimated
    time left is at most the lead (read_ahead_of_start)."""
    from pagetrace.tools.launch_files import is_device
    from pagetrace.tools.launch_plan import plan_ranges
    devices = [i for i in keep if is_device(pack.files[i])]
    files = [i for i in keep if i not in devices]
    pages = read_metadata(pack, devices, gap) if devices else 0
    if not files:
        return pages, None
    ranges = plan_ranges(pack, files, gap, merge=True)
    fd = _memfd(list_bytes(ranges, pack.page_size))
    pages += sum(r[2] for r in ranges)
    if ahead and ahead[0] > 0:
        lead, devices = ahead
        on = {pack.files[i].path for i in files if pack.files[i].dev in devices}
        total = sum(r[2] for r in ranges if r[0] in on) * pack.page_size
        return pages, read_ahead_of_start(replay, fd, largest * pack.page_size, lead,
                                          devices, total)
    return pages, run_sorted(replay, fd, largest * pack.page_size)


def read_metadata(pack, devices, gap):
    """The metadata ranges of the device nodes `devices` (indexes into
    pack.files), gaps of up to `gap` pages filled, asked for all at once in
    device order (WILLNEED through the device's page cache, which ext4's
    buffer heads are), then waited for by reading them back. Pages read;
    a device that cannot be read is left out (its files' opens read it)."""
    from pagetrace.tools.launch_plan import plan_ranges
    size, pages = pack.page_size, 0
    for path, page, count in plan_ranges(pack, devices, gap, merge=True):
        pages += count
    for index in devices:
        path = pack.files[index].path
        spans = [(p, c) for q, p, c in plan_ranges(pack, [index], gap, merge=True) if q == path]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            for page, count in spans:
                os.posix_fadvise(fd, page * size, count * size, os.POSIX_FADV_WILLNEED)
            for page, count in spans:
                os.pread(fd, 1, (page + count - 1) * size)
        except OSError:
            pass
        finally:
            os.close(fd)
    return pages


# ---------------------------------------------------------------------------
# CMD started before the sorted read ends: the read's tail overlaps the
# part of the start that does not wait for the seeking device.

def start_lead(pack, keep, devices):
    """Seconds from the recorded start to its first use of a regular
    file's page on one of `devices` (the seeking ones): how long CMD runs
    before it needs them. The first record's run is the reference (ts_us)."""
    from pagetrace.tools.launch_files import is_device
    on = {i for i in keep if pack.files[i].dev in devices and not is_device(pack.files[i])}
    first = min((r.ts_us for r in pack.ranges if r.file in on), default=0)
    return first / 1e6


def _sectors_read(devices):
    """Sectors read so far from `devices` (MAJ:MIN), from their stat files."""
    total = 0
    for dev in devices:
        try:
            with open(f"/sys/dev/block/{dev}/stat") as f:
                total += int(f.read().split()[2])
        except (OSError, IndexError, ValueError):
            pass
    return total


def read_ahead_of_start(replay, fd, max_request, lead, devices, total):
    """replay --sorted --prefetch in a grandchild (nobody's zombie once CMD
    has replaced this process); returns None when it has ended, or once its
    time left on `devices` is estimated at most `lead` s: the bytes left of
    `total` at the rate they have been read since the devices' first read
    after it started (files of other devices may come first)."""
    import select
    from pagetrace.tools.launch_files import leave_cmd_output, say
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(done_r)
            if os.fork() == 0:
                leave_cmd_output()
                problem = run_sorted(replay, fd, max_request)
                if problem:
                    say(f"warning: the prefetch failed ({problem})")
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    os.close(done_w)
    os.close(fd)
    base, first = _sectors_read(devices), None
    while not select.select([done_r], [], [], POLL_S)[0]:
        now, read = time.monotonic(), _sectors_read(devices)
        if first is None:
            first = (now, read) if read > base else None
            continue
        elapsed, rate = now - first[0], (read - first[1]) * 512
        left = total - (read - base) * 512
        if elapsed >= MIN_RATE_S and rate > 0 and left * elapsed / rate <= lead:
            break
    os.close(done_r)
    return None

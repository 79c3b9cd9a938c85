"""`pagetrace launch`, sorted mode: the pack's pages read in disk order
before CMD starts, by `replay --sorted --prefetch` (FIEMAP order) from a
list in the trace format written to a memfd. Used by the planner
(tools/launch.py; its `sorted_prefetch_only` is the bench's bound: the
pack's sorted read as the launch plans it, with no command).
Standard library only.
"""
import os

from pagetrace.core import packfile


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


def sorted_prefetch(pack, keep, gap, largest, replay):
    """Reads the kept files' ranges, gaps of up to `gap` pages filled, in
    disk order, in requests of at most `largest` pages; (pages read, None
    or why it failed). The metadata of device nodes first (read_metadata),
    so that replay's opens and FIEMAP find it cached."""
    from pagetrace.tools.launch_files import is_device
    from pagetrace.tools.launch_plan import plan_ranges
    devices = [i for i in keep if is_device(pack.files[i])]
    files = [i for i in keep if i not in devices]
    pages = read_metadata(pack, devices, gap) if devices else 0
    if not files:
        return pages, None
    ranges = plan_ranges(pack, files, gap, merge=True)
    problem = run_sorted(replay, _memfd(list_bytes(ranges, pack.page_size)),
                         largest * pack.page_size)
    return pages + sum(r[2] for r in ranges), problem


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

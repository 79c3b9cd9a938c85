"""pagecache: finding the files and opening them safely, the traces that name
them, and which processes map a file (why pages survive eviction)."""
import os
import stat
from collections import namedtuple

from pagetrace.core import tracefile
from pagetrace.core.escape import display_path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class PagecacheError(Exception):
    """A problem with one file: reported as 'PATH: message' (main adds the tool's name)."""

    def __init__(self, path, message):
        super().__init__(f"{display_path(path)}: {message}")
        self.path = path
        self.message = message



def pages_in(size):
    return (size + PAGE_SIZE - 1) // PAGE_SIZE


# ---------------------------------------------------------------------------
# Finding the files, and opening them without ever blocking or following a
# link that was not asked for.

def describe_file_type(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def collect_files(paths, recursive=False, follow=False):
    """Expand the command line's paths into regular files.

    Returns (files, problems): problems are PagecacheErrors for paths that
    were skipped, each with the reason. Nothing is opened here.
    """
    files, problems = [], []
    for path in paths:
        st = _stat_or_problem(path, follow, problems)
        if st is None or _take_non_directory(path, st, files, problems):
            continue
        if recursive:
            _walk_directory(path, follow, files, problems)
        else:
            problems.append(PagecacheError(path, "Is a directory (use -r to walk it)"))
    return files, problems


def _stat_or_problem(path, follow, problems):
    try:
        return os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        problems.append(PagecacheError(path, exc.strerror))
        return None


def _take_non_directory(path, st, files, problems):
    """A regular file goes to files; a link (not followed) or another kind
    of file is a problem. False for a directory, which the caller handles."""
    if stat.S_ISREG(st.st_mode):
        files.append(path)
    elif stat.S_ISLNK(st.st_mode):
        problems.append(PagecacheError(
            path, "is a symbolic link, not followed (use --follow)"))
    elif stat.S_ISDIR(st.st_mode):
        return False
    else:
        problems.append(PagecacheError(
            path, f"is {describe_file_type(st.st_mode)}, skipped"))
    return True


def _walk_directory(top, follow, files, problems):
    def on_error(exc):
        problems.append(PagecacheError(exc.filename, exc.strerror))

    for dirpath, dirnames, filenames in os.walk(top, onerror=on_error,
                                                followlinks=follow):
        dirnames.sort()
        # Links to directories are listed in dirnames; os.walk does not
        # descend into them unless following, so they are said here.
        for name in sorted(filenames) + [d for d in dirnames
                                         if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            st = _stat_or_problem(path, follow, problems)
            if st is not None:
                _take_non_directory(path, st, files, problems)


def open_regular(path, follow=False):
    """Open a regular file read-only, or raise PagecacheError.

    Checks the type before opening and again on the open descriptor (the file
    may have been replaced in between); O_NONBLOCK so that a FIFO or device
    that slipped through can never block the open.
    """
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        raise PagecacheError(path, exc.strerror) from None
    if not stat.S_ISREG(st.st_mode):
        raise PagecacheError(path, f"is {describe_file_type(st.st_mode)}, skipped")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise PagecacheError(path, exc.strerror) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PagecacheError(path, "changed into something that is not a "
                             "regular file, skipped")
    return fd


# ---------------------------------------------------------------------------
# Traces (docs/trace-format.md, version 1).

Trace = namedtuple("Trace", "path page_size pages special malformed lost")
Trace.__doc__ = """A trace read for its set of files and pages (`read` records).

pages:     {path: set of byte offsets}, paths in first-read order
special:   the // paths (deleted, unknown, dev), which name no usable file
malformed: [(line_number, reason)]
lost:      the trailer's lost count, or None without a trailer
"""


def read_trace(path):
    """Read a trace's files and pages with the core reader. Raises
    tracefile.TraceError if it is refused; malformed lines are collected,
    not fatal (the format says to go on)."""
    trace = tracefile.read(path)
    pages, special = tracefile.pages_by_file(trace, kinds=("read",))
    lost = trace.trailer["lost"] if trace.trailer else None
    return Trace(trace.source, trace.header.page_size, pages, special,
                 trace.malformed, lost)


def trace_notes(trace):
    """Messages about what of a trace is not used, for stderr."""
    where = display_path(trace.path)
    notes = [f"{where}:{number}: {reason}" for number, reason in trace.malformed]
    if trace.special:
        notes.append(f"{where}: skipped {len(trace.special)} special path(s) "
                     f"that name no usable file: "
                     + ", ".join(display_path(p) for p in trace.special[:5])
                     + (", ..." if len(trace.special) > 5 else ""))
    if trace.lost:
        notes.append(f"{where}: warning: the tracer lost {trace.lost} "
                     "event(s): the trace is incomplete")
    return notes


def traced_system_pages(trace, path):
    """The trace's pages of one file, as this system's page numbers."""
    pages = set()
    for offset in trace.pages[path]:
        first = offset // PAGE_SIZE
        end = (offset + trace.page_size + PAGE_SIZE - 1) // PAGE_SIZE
        pages.update(range(first, end))
    return pages


# ---------------------------------------------------------------------------
# Which processes map a file: the usual reason that pages survive DONTNEED.

Mapping = namedtuple("Mapping", "pid comm start end perms first_page end_page")


def find_mappings(st):
    """Every mapping of the file (device and inode of st) in /proc/*/maps.

    Returns (mappings, unreadable): the number of processes whose maps could
    not be read (other users' processes when not root).
    """
    want_dev = (os.major(st.st_dev), os.minor(st.st_dev))
    mappings, unreadable = [], 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                lines = f.readlines()
        except (PermissionError, ProcessLookupError):
            unreadable += 1
            continue
        except OSError:
            continue  # exited meanwhile
        for line in lines:
            mapping = _parse_maps_line(pid, line, want_dev, st.st_ino)
            if mapping:
                mappings.append(mapping)
    return mappings, unreadable


def _parse_maps_line(pid, line, want_dev, want_ino):
    parts = line.split(None, 5)
    if len(parts) < 5 or parts[4] != str(want_ino):
        return None
    major, _, minor = parts[3].partition(":")
    try:
        if (int(major, 16), int(minor, 16)) != want_dev:
            return None
        start, end = (int(x, 16) for x in parts[0].split("-"))
        first_page = int(parts[2], 16) // PAGE_SIZE
    except ValueError:
        return None
    return Mapping(int(pid), _comm_of(pid), start, end, parts[1], first_page,
                   first_page + (end - start) // PAGE_SIZE)


def _comm_of(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def explain_resident(runs, mappings, unreadable):
    """Split resident page runs by the mappings that cover them.

    Returns [{"first_page", "end_page", "reason", "mapped_by": [...]}].
    """
    explained = []
    for first, end in runs:
        cuts = {first, end}
        for m in mappings:
            cuts.update(p for p in (m.first_page, m.end_page) if first < p < end)
        cuts = sorted(cuts)
        for lo, hi in zip(cuts, cuts[1:]):
            covering = [m for m in mappings if m.first_page <= lo < m.end_page]
            _append_piece(explained, lo, hi, covering, unreadable)
    return explained


def _append_piece(explained, lo, hi, covering, unreadable):
    mapped_by = [{"pid": m.pid, "comm": m.comm, "perms": m.perms,
                  "maps": f"{m.start:x}-{m.end:x}"} for m in covering]
    if covering:
        reason = "mapped by " + ", ".join(
            f"pid {m.pid} ({m.comm}) at {m.start:x}-{m.end:x} {m.perms}"
            for m in covering)
    else:
        reason = ("not mapped by any process"
                  + (f" whose maps could be read ({unreadable} could not: "
                     "run as root)" if unreadable else "")
                  + ": locked, dirty, under writeback, or read again since")
    if explained and explained[-1]["end_page"] == lo and explained[-1]["reason"] == reason:
        explained[-1]["end_page"] = hi
    else:
        explained.append({"first_page": lo, "end_page": hi, "reason": reason,
                          "mapped_by": mapped_by})

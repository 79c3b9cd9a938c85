"""resolve-inodes: turn tracer/readpage.bt output into trace format v1.

readpage.bt can only see a page's device, inode number and index; this
helper finishes the job: it finds each inode's path by walking the
filesystems that hold them (once per device, stopping as soon as every
inode asked for is found), converts the monotonic timestamps to wall-clock
microseconds, expands large folios into pages, and writes the header and
trailer of docs/trace-format.md.

USAGE
  sudo bpftrace tracer/readpage.bt -c 'CMD ARGS' | resolve-inodes [-o FILE]

EXAMPLES
  sudo bpftrace tracer/readpage.bt -c '/usr/bin/ls -l /usr/lib' | scripts/resolve-inodes > reads.log
  scripts/resolve-inodes raw.txt -o reads.log --command 'ls -l /usr/lib'

Lines that do not start with "@@pt" (the traced command's own output,
bpftrace's messages) are ignored, except "Lost N events", which is counted
in the trailer's lost= field and makes the exit status 3.

Part of the standard-library core (pagetrace.tools.resolve_inodes); scripts/resolve-inodes
is its entry point. Paths are escaped by pagetrace.core.escape, as every other
writer of traces escapes them.
"""
import argparse
import datetime
import os
import re
import socket
import stat
import sys
import time

from pagetrace import __version__
from pagetrace.core import tracewriter
from pagetrace.core.escape import escape

PAGE = os.sysconf("SC_PAGE_SIZE")
LOST = re.compile(r"Lost (\d+) events")
EXIT_LOST = 3


def split_dev(kernel_dev):
    """Kernel-internal dev_t (major << 20 | minor) to (major, minor)."""
    return kernel_dev >> 20, kernel_dev & 0xFFFFF


def read_mounts():
    """(major, minor) -> mount points whose root is the filesystem's root."""
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            major, minor = (int(x) for x in fields[2].split(":"))
            if fields[3] == "/":
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                mounts.setdefault((major, minor), []).append(point)
    return mounts


def find_inodes(root, wanted):
    """Walk one filesystem from @root; return {ino: path} for @wanted inodes."""
    found = {}
    root_dev = os.lstat(root).st_dev
    stack = [root]
    while stack and len(found) < len(wanted):
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != root_dev:
                continue  # another filesystem mounted here
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
            elif st.st_ino in wanted and st.st_ino not in found:
                found[st.st_ino] = entry.path
    return found


def resolve(records):
    """{(kernel_dev, ino): printable path} for every file in @records."""
    by_dev = {}
    for _, dev, ino, _, _ in records:
        by_dev.setdefault(dev, set()).add(ino)
    mounts = read_mounts()
    paths = {}
    for dev, inodes in by_dev.items():
        major, minor = split_dev(dev)
        found = {}
        for point in mounts.get((major, minor), []):
            found.update(find_inodes(point, inodes - set(found)))
            if len(found) == len(inodes):
                break
        for ino in inodes:
            paths[(dev, ino)] = (escape(found[ino]) if ino in found
                                 else f"//unknown/{major}:{minor}/{ino}")
    return paths


def parse(stream):
    records, lost = [], 0
    for raw in stream:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if line.startswith("@@pt "):
            fields = line.split()
            if len(fields) == 6:
                records.append(tuple(int(x) for x in fields[1:]))
        else:
            m = LOST.search(line)
            if m:
                lost += int(m.group(1))
    return records, lost


def write_trace(out, records, lost, paths, command):
    # CLOCK_REALTIME - CLOCK_MONOTONIC now equals its value during the trace
    # (barring a clock step, which the header's start time would show).
    offset_ns = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    first = records[0][0] if records else time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    start = datetime.datetime.fromtimestamp((first + offset_ns) / 1e9, datetime.timezone.utc)
    out.write(tracewriter.header(PAGE, fields={
        "command": command or "-",
        "start": start.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "kernel": os.uname().release, "host": socket.gethostname(),
        "tracer": "readpage.bt + resolve-inodes "
                  "(filemap:mm_filemap_add_to_page_cache)"}))
    pages = 0
    for mono_ns, dev, ino, index, order in records:
        ts_us = (mono_ns + offset_ns) // 1000
        path = paths[(dev, ino)]
        for page in range(index, index + (1 << order)):
            out.write("%d %s %d\n" % (ts_us, path, page * PAGE))
        pages += 1 << order
    duration = (records[-1][0] - first) // 1000 if records else 0
    out.write(tracewriter.trailer(pages, PAGE, len(paths), duration, lost))


def main(argv=None, prog="resolve-inodes"):
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[1],
        epilog=__doc__[__doc__.index("USAGE"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-V", "--version", action="version",
                        version=f"%(prog)s (pagetrace) {__version__}")
    parser.add_argument("input", nargs="?", default="-", help="readpage.bt output (default: stdin)")
    parser.add_argument("-o", "--output", help="write the trace here (default: stdout)")
    parser.add_argument("--command", default="", help="what was traced, for the header")
    args = parser.parse_args(argv)
    try:
        stream = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
        records, lost = parse(stream)
        out = (open(args.output, "w", errors="surrogateescape") if args.output
               else sys.stdout)
        out.reconfigure(errors="surrogateescape")
    except OSError as e:
        print(f"{prog}: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    write_trace(out, records, lost, resolve(records), args.command)
    out.flush()
    if lost:
        print(f"{prog}: {lost} events were LOST by bpftrace; the trace is incomplete",
              file=sys.stderr)
        return EXIT_LOST
    return 0


"""The prefetch pack format (docs/pack-format.md): the one reader and the
one writer, and the identity of a file as a pack records it.

A pack is what `pagetrace pack` compiles from `trace --used` runs and what
`pagetrace launch` prefetches: the files a start-up used, each with its
identity (device, inode, size, mtime, CRC-32 of its first 4 KiB), and the
ranges of their pages it used, in first-access order. Standard library
only: `pagetrace launch` runs on the system Python, under sudo or from a
systemd unit.
"""
import os
import re
import zlib
from collections import namedtuple

from pagetrace.core.escape import EscapeError, escape, unescape_bytes

FORMAT_VERSION = 1
MAGIC = b"# pagetrace-pack: "
CHECKSUM_KEY = b"# crc32: "
# The content check covers at most this many bytes at the start of a file.
HEAD_BYTES = 4096

# dev is "MAJ:MIN"; mtime_ns nanoseconds since the epoch; head_crc32 the
# CRC-32 of the first min(size, HEAD_BYTES) bytes.
PackFile = namedtuple("PackFile", "path dev ino size mtime_ns head_crc32")
# file: index into Pack.files; page: first page (offset / page_size);
# ts_us: first access, microseconds after the recorded run's first record.
PackRange = namedtuple("PackRange", "file page pages ts_us")
# request_us: {"MAJ:MIN": median microseconds of a random 4 KiB O_DIRECT
# read of the device, measured when the pack was made}; may be empty.
Pack = namedtuple("Pack", "version page_size created command runs "
                  "read_ahead_kb files ranges request_us", defaults=({},))
HEADER_KEYS = ("page-size", "created", "command", "runs", "read-ahead-kb")


class PackError(ValueError):
    """A pack refused as a whole: `str()` is `SOURCE: reason`."""

    def __init__(self, source, reason):
        self.source, self.reason = source, reason
        super().__init__(f"{source}: {reason}")


class PackVersionError(PackError):
    """The pack is of a format version this reader does not know."""


def dev_text(st_dev):
    return f"{os.major(st_dev)}:{os.minor(st_dev)}"


def head_crc32(fd, size):
    """CRC-32 (zlib's, ISO-HDLC) of the first min(size, HEAD_BYTES) bytes."""
    return zlib.crc32(os.pread(fd, min(size, HEAD_BYTES), 0)) & 0xFFFFFFFF


def identify(path):
    """The PackFile of `path` as it is now (OSError when it cannot be
    opened). Opened with O_NOATIME where allowed, so that taking a file's
    identity does not write to it."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_NOATIME)
    except PermissionError:
        fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        return PackFile(path, dev_text(st.st_dev), st.st_ino, st.st_size,
                        st.st_mtime_ns, head_crc32(fd, st.st_size))
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# Where packs live: one per command.

DEFAULT_PACKS_DIR = "/var/lib/pagetrace/packs"

def packs_dir():
    return os.environ.get("PAGETRACE_PACKS", DEFAULT_PACKS_DIR)


def pack_name(command):
    """The pack's file name for `command` (argv): the program's name and
    a CRC-32 of the whole argv, so that one program started two ways has
    two packs."""
    key = b"\0".join(os.fsencode(a) for a in command)
    return f"{os.path.basename(command[0]) or 'command'}-{zlib.crc32(key):08x}.pack"


def find_pack(name_or_path):
    """A pack path: the argument if it names a file or has a slash, else
    NAME or NAME.pack in the packs directory."""
    if os.sep in name_or_path or os.path.exists(name_or_path):
        return name_or_path
    for candidate in (name_or_path, name_or_path + ".pack"):
        path = os.path.join(packs_dir(), candidate)
        if os.path.exists(path):
            return path
    return name_or_path


# ---------------------------------------------------------------------------
# Writing.

def render(pack):
    """The bytes of `pack`, checksum line included."""
    command = escape(pack.command).encode("utf-8", "surrogateescape")
    head = [MAGIC + b"%d\n" % FORMAT_VERSION,
            b"# page-size: %d\n" % pack.page_size,
            b"# created: %d\n" % pack.created,
            b"# command: " + command + b"\n",
            b"# runs: %d\n" % pack.runs,
            b"# read-ahead-kb: " + str(pack.read_ahead_kb).encode() + b"\n"]
    if pack.request_us:
        head.append(b"# request-us: " + " ".join(
            f"{dev}={us}" for dev, us in pack.request_us.items()).encode() + b"\n")
    body = [b"file %s %d %d %d %08x %s\n" % (
        f.dev.encode(), f.ino, f.size, f.mtime_ns, f.head_crc32,
        escape(f.path).encode("utf-8", "surrogateescape")) for f in pack.files]
    body += [b"range %d %d %d %d\n" % tuple(r) for r in pack.ranges]
    data = b"".join(head + body)
    return data + CHECKSUM_KEY + b"%08x\n" % (zlib.crc32(data) & 0xFFFFFFFF)


def write(pack, path):
    """Writes `pack` to `path` atomically (a temporary file renamed over
    it), so that a launch never reads half a pack."""
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temporary, "wb") as f:
        f.write(render(pack))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


# ---------------------------------------------------------------------------
# Reading.

# Numbers are unsigned 64-bit (the C reader's uint64_t); a device's major
# and minor numbers 32-bit.
U64 = 1 << 64
U32 = 1 << 32


def _unsigned(raw, what, line_no):
    if not raw.isdigit() or int(raw) >= U64:
        raise PackError(None, f"line {line_no}: {what} is not an unsigned "
                        f"64-bit integer: {raw[:64].decode('utf-8', 'replace')!r}")
    return int(raw)


def _is_dev(major, minor):
    return (major.isdigit() and minor.isdigit()
            and int(major) < U32 and int(minor) < U32)


def _check_whole(data):
    """(version, body without the checksum line) or PackError's reason."""
    if not data:
        raise PackError(None, "empty file: not a pagetrace pack")
    first, _, _ = data.partition(b"\n")
    if not first.startswith(MAGIC):
        raise PackError(None, "not a pagetrace pack (the first line is not "
                        "'# pagetrace-pack: VERSION')")
    raw_version = first[len(MAGIC):].strip()
    if raw_version != str(FORMAT_VERSION).encode():
        text = raw_version[:64].decode("utf-8", "replace")
        raise PackVersionError(None, f"pack format version {text}; this "
                               f"reader knows version {FORMAT_VERSION}: "
                               "record the pack again with this pagetrace")
    if b"\0" in data:
        raise PackError(None, "binary data (a NUL byte): the pack is corrupt")
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    last = data[cut:]
    if not (last.startswith(CHECKSUM_KEY) and last.endswith(b"\n")):
        raise PackError(None, "no '# crc32:' line at the end: the pack is "
                        "truncated or corrupt")
    stated = last[len(CHECKSUM_KEY):].strip()
    computed = b"%08x" % (zlib.crc32(data[:cut]) & 0xFFFFFFFF)
    if stated != computed:
        raise PackError(None, f"checksum mismatch (crc32 "
                        f"{stated[:16].decode('utf-8', 'replace')} in the pack, "
                        f"{computed.decode()} of its contents): the pack is corrupt")
    return data[:cut]


_FILE = re.compile(rb"file (\d+:\d+) (\d+) (\d+) (\d+) ([0-9a-f]{8}) (/[^ \\]*)\Z")


def _canonical_dev(major, minor):
    """MAJ:MIN as dev_text writes it ("254:00" is "254:0"), so that a
    device compares as the number it is, as the C reader compares it."""
    return f"{int(major)}:{int(minor)}"


def _file_line(fields, line_no, line=b""):
    """The PackFile of a file line; the common case (an absolute path
    without escapes) by one regular expression, the rest field by field."""
    match = _FILE.match(line)
    # 19 digits are always below 2^64; a longer number, or a device number
    # of 2^32 or more, is left to the field-by-field checks below.
    if match and max(len(match[2]), len(match[3]), len(match[4])) < 20 \
            and _is_dev(*match[1].split(b":")):
        dev, ino, size, mtime, crc, path = match.groups()
        return PackFile(path.decode("utf-8", "surrogateescape"),
                        _canonical_dev(*dev.split(b":")),
                        int(ino), int(size), int(mtime), int(crc, 16))
    if len(fields) != 7:
        raise PackError(None, f"line {line_no}: a file line has 6 fields "
                        "after 'file': dev ino size mtime_ns head_crc32 path")
    dev = fields[1].decode("ascii", "replace")
    major, colon, minor = dev.partition(":")
    if not (colon and _is_dev(major, minor)):
        raise PackError(None, f"line {line_no}: device {dev!r} is not MAJ:MIN")
    crc = fields[5]
    if len(crc) != 8 or any(c not in b"0123456789abcdef" for c in crc):
        raise PackError(None, f"line {line_no}: head_crc32 is not 8 lower-case "
                        "hex digits")
    try:
        path = unescape_bytes(fields[6]).decode("utf-8", "surrogateescape")
    except EscapeError as err:
        raise PackError(None, f"line {line_no}: path: {err}") from None
    if not path.startswith("/"):
        raise PackError(None, f"line {line_no}: path is not absolute")
    return PackFile(path, _canonical_dev(major, minor), _unsigned(fields[2], "ino", line_no),
                    _unsigned(fields[3], "size", line_no),
                    _unsigned(fields[4], "mtime_ns", line_no), int(crc, 16))


def _range_line(fields, line_no, files):
    if len(fields) != 5:
        raise PackError(None, f"line {line_no}: a range line has 4 fields "
                        "after 'range': file page pages ts_us")
    r = PackRange(*(_unsigned(f, what, line_no) for f, what in
                    zip(fields[1:], ("file", "page", "pages", "ts_us"))))
    if r.file >= files:
        raise PackError(None, f"line {line_no}: file {r.file} is not listed "
                        f"(the pack lists {files})")
    if r.pages == 0:
        raise PackError(None, f"line {line_no}: a range of 0 pages")
    return r


def _header(keys):
    missing = [k for k in HEADER_KEYS if k not in keys]
    if missing:
        raise PackError(None, f"header key {missing[0]} is missing")
    page_size = _unsigned(keys["page-size"], "page-size", 2)
    if page_size < 512 or page_size & (page_size - 1):
        raise PackError(None, f"page-size {page_size} is not a power of two "
                        "of at least 512")
    try:
        command = unescape_bytes(keys["command"]).decode("utf-8", "surrogateescape")
    except EscapeError as err:
        raise PackError(None, f"command: {err}") from None
    read_ahead = keys["read-ahead-kb"].decode("utf-8", "replace")
    return (page_size, _unsigned(keys["created"], "created", 3), command,
            _unsigned(keys["runs"], "runs", 5),
            int(read_ahead) if read_ahead.isdigit() else read_ahead)


def _request_us(raw):
    """{dev: us} of the optional request-us key: `MAJ:MIN=US ...`."""
    found = {}
    for item in raw.decode("utf-8", "replace").split():
        dev, _, us = item.partition("=")
        major, colon, minor = dev.partition(":")
        if not (colon and _is_dev(major, minor) and us.isdigit() and int(us) < U64):
            raise PackError(None, f"request-us: {item[:64]!r} is not MAJ:MIN=US")
        found[_canonical_dev(major, minor)] = int(us)
    return found


_RANGE = re.compile(rb"range (\d+) (\d+) (\d+) (\d+)\Z")


def parse_bytes(data, source="<bytes>", ranges=True):
    """The Pack in `data`; PackError (PackVersionError for another format
    version) when it is refused. A pack is written by a program, so any
    malformed line refuses the whole pack. ranges=False: the header and
    the files only (Pack.ranges is None), for a launch that decides before
    it reads the ranges; the checksum is checked all the same."""
    try:
        body = _check_whole(data)
        keys, files, found = {}, [], []
        if not ranges:
            # Only the header and the file lines are needed: stop before
            # the (many) range lines.
            cut = body.find(b"\nrange ")
            body = body if cut < 0 else body[:cut + 1]
        lines = body.split(b"\n")[1:-1]
        for line_no, line in enumerate(lines, start=2):
            if line.startswith(b"#"):
                key, colon, value = line[1:].strip().partition(b":")
                if colon:
                    keys.setdefault(key.decode("ascii", "replace"), value.strip())
                continue
            if line.startswith(b"range "):
                if ranges:
                    found = _ranges(lines, line_no, len(files))
                break
            fields = line.split(b" ")
            if fields[0] != b"file":
                raise PackError(None, f"line {line_no}: not a file, range or "
                                "comment line")
            files.append(_file_line(fields, line_no, line))
        return Pack(FORMAT_VERSION, *_header(keys), files,
                    found if ranges else None,
                    _request_us(keys.get("request-us", b"")))
    except PackError as err:
        raise type(err)(source, err.reason) from None


def _ranges(lines, first_no, files):
    """The range lines from line `first_no` on (the last lines of a pack),
    with a regular expression per line: a firefox-esr pack has 12,000."""
    found, make = [], PackRange._make
    for line_no, line in enumerate(lines[first_no - 2:], start=first_no):
        match = _RANGE.match(line)
        if match is None:
            if not line.startswith(b"range "):
                raise PackError(None, f"line {line_no}: not a range line "
                                "(range lines come last)")
            _range_line(line.split(b" "), line_no, files)  # says what is wrong
        r = make(map(int, match.groups()))
        if r.file >= files or r.pages == 0 or max(r) >= U64:
            _range_line(line.split(b" "), line_no, files)
        found.append(r)
    return found


# One range line, anchored at both ends of its line: a line that does not
# match exactly is not counted, so a count short of the lines means the
# section is not what the writer writes (parse_bytes then says why).
_RANGE_LINE = re.compile(rb"^range (\d+) (\d+) (\d+) \d+$", re.M)


def range_triples(data, source="<bytes>"):
    """[(file, page, pages)] of the range lines of pack bytes `data`, in
    their order, for `pagetrace launch`'s prefetch beside the start: by one
    regular expression over the section (6 ms for firefox-esr's 11,000
    ranges, against 12 ms for parse_bytes' Ranges); when a line is not a
    well-formed range of a listed file, parse_bytes gives its PackError.
    The checksum is the caller's to have checked (parse_bytes(ranges=False))."""
    start = data.find(b"\nrange ") + 1
    if start == 0:
        return []
    end = data.rfind(b"\n", 0, len(data) - 1) + 1
    files = data.count(b"\nfile ", 0, start)
    section = data[start:end]
    found = [(int(f), int(p), int(n)) for f, p, n in _RANGE_LINE.findall(section)]
    if (len(found) != section.count(b"\n")
            or any(f >= files or n == 0 for f, _, n in found)):
        return [(r.file, r.page, r.pages)
                for r in parse_bytes(data, source).ranges]
    return found


def load(path):
    """The bytes of pack file `path` (PackError when it cannot be read, or
    is not a regular file: opened with O_NONBLOCK, so that a FIFO does not
    hang the reader)."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        raise PackError(os.fsdecode(path), err.strerror or str(err)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise PackError(os.fsdecode(path), "Is a directory" if stat.S_ISDIR(mode)
                        else "not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read()
        except OSError as err:
            raise PackError(os.fsdecode(path), err.strerror or str(err)) from None


def read(path, ranges=True):
    """The Pack in file `path` (PackError when it cannot be read or is
    refused); see parse_bytes for `ranges`."""
    return parse_bytes(load(path), os.fsdecode(path), ranges)


def as_json(pack):
    """The pack as a JSON-able dict (conformance samples, --json)."""
    return {"version": pack.version, "page_size": pack.page_size,
            "created": pack.created, "command": pack.command,
            "runs": pack.runs, "read_ahead_kb": pack.read_ahead_kb,
            "files": [f._asdict() for f in pack.files],
            "ranges": [list(r) for r in pack.ranges],
            "request_us": pack.request_us}

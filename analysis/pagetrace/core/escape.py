"""Octal escaping of paths, as in /proc/mounts (docs/trace-format.md).

Paths are byte strings on Linux. The trace writes space, tab, newline,
backslash, the other bytes below 0x20 and 0x7f as a backslash and exactly
three octal digits; everything else is written as it is. Python sees a path
as `str` decoded from UTF-8 with `surrogateescape`, so undecodable bytes
survive the round trip.
"""
import os
import re

_OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3})")
# A backslash that does not start a three-octal-digit escape.
_BAD_ESCAPE = re.compile(rb"\\(?![0-7]{3})")
_NEEDS_ESCAPE = re.compile(rb"[\x00-\x20\\\x7f]")


class EscapeError(ValueError):
    """A backslash not followed by three octal digits."""


def _octal_to_byte(match):
    value = int(match.group(1), 8)
    if value > 0xFF:
        # \400 to \777 name no byte; a writer never produces them.
        raise EscapeError(f"escape \\{match.group(1).decode()} is above \\377")
    return bytes((value,))


def unescape_bytes(raw):
    """Turn every `\\ooo` in `raw` (bytes) back into its byte."""
    if b"\\" not in raw:
        return raw
    if _BAD_ESCAPE.search(raw):
        raise EscapeError("backslash not followed by three octal digits")
    return _OCTAL_ESCAPE.sub(_octal_to_byte, raw)


def unescape(field):
    """Unescape one field given as `str` (surrogateescape-decoded) or bytes.

    Returns `str`, decoded from UTF-8 with surrogateescape.
    """
    if isinstance(field, str):
        if "\\" not in field:
            return field
        field = field.encode("utf-8", "surrogateescape")
    return unescape_bytes(field).decode("utf-8", "surrogateescape")


def escape_bytes(raw):
    """Escape bytes for a trace; returns bytes."""
    return _NEEDS_ESCAPE.sub(lambda m: b"\\%03o" % m.group(0)[0], raw)


def escape(name):
    """Escape a path (`str` or bytes) for a trace or a CSV; returns `str`."""
    if isinstance(name, str):
        name = name.encode("utf-8", "surrogateescape")
    return escape_bytes(name).decode("utf-8", "surrogateescape")


def display_path(path):
    """A path printable on one line of any terminal, for messages: control
    bytes and DEL as \\ooo (as in traces), bytes that are not UTF-8 as
    \\xNN; spaces and backslashes as they are."""
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    return "".join(f"\\{ord(c):03o}" if ord(c) < 0x20 or c == "\x7f" else c
                   for c in text)

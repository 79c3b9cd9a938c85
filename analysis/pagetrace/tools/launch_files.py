"""`pagetrace launch`: which files of a pack are still the ones recorded
(device, inode, size and mtime with one stat; the CRC-32 of the first
4 KiB where asked), the one line that names those skipped, the
launch's messages, and the standard streams of a prefetch beside CMD. Shared by launch and `launch --refine` (packrefine).
Standard library only.
"""
import os
import sys

from pagetrace.core import packfile

PROG = "pagetrace launch"


class LaunchError(Exception):
    """Stops the launch before CMD runs: one line, exit status `status`."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def say(message):
    sys.stderr.write(f"{PROG}: {message}\n")


def leave_cmd_output():
    """In a prefetch beside CMD: no end of CMD's input or output held, so
    that a reader of CMD's output sees its end when CMD ends, not when the
    prefetch does (its warnings go to stderr)."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


# ---------------------------------------------------------------------------
# 1. Which files are still the ones recorded.

def _shown(paths, limit=3):
    names = ", ".join(packfile.escape(p) for p in paths[:limit])
    return names + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _mounted_devices():
    from pagetrace.tools import throttle
    return {packfile.dev_text(m.dev) for m in throttle.mounts()}


def stale_reason(entry, st):
    """Why the file recorded as `entry` is not the file `st` describes, or
    None when device, inode, size and mtime all match."""
    if packfile.dev_text(st.st_dev) != entry.dev or st.st_ino != entry.ino:
        return "replaced"
    if st.st_size != entry.size or st.st_mtime_ns != entry.mtime_ns:
        return "changed"
    return None


def content_changed(entry):
    """True when the first 4 KiB of the file no longer have the recorded
    CRC-32 (an in-place rewrite that kept size and mtime)."""
    try:
        return packfile.identify(entry.path).head_crc32 != entry.head_crc32
    except OSError:
        return True


def is_device(entry):
    """A pack's device node: the metadata pages of the file system on it
    (inode tables, directories, extent blocks; packrecord.seeking_metadata),
    read through its page cache."""
    return entry.path.startswith("/dev/")


def device_reason(st, devices):
    """Why a device node's metadata is not prefetched, or None: it must be
    a block device under a file of the pack that is still the one
    recorded (so the file system is the one recorded, whatever the node's
    own times), and reading it is root's."""
    import stat
    if not stat.S_ISBLK(st.st_mode) or packfile.dev_text(st.st_rdev) not in devices:
        return "replaced"
    if os.geteuid() != 0:
        return f"not readable by uid {os.geteuid()}"
    return None


def check_files(pack):
    """(indices of the files to prefetch, {reason: [paths]})."""
    keep, skipped, gone = [], {}, []
    as_root = os.geteuid() == 0
    devices = None
    for index, entry in enumerate(pack.files):
        try:
            st = os.stat(entry.path)
            if is_device(entry):
                if devices is None:
                    devices = _kept_devices(pack)
                reason = device_reason(st, devices)
                if reason is None:
                    keep.append(index)
                else:
                    skipped.setdefault(reason, []).append(entry.path)
                continue
            reason = stale_reason(entry, st)
            if packfile.dev_text(st.st_dev) != entry.dev:
                gone.append(index)
        except FileNotFoundError:
            reason = "missing"
            gone.append(index)
        except OSError as err:
            reason = f"not checked ({err.strerror})"
        if reason is None and not as_root and not os.access(entry.path, os.R_OK):
            reason = f"not readable by uid {os.geteuid()}"
        if reason is None:
            keep.append(index)
        else:
            skipped.setdefault(reason, []).append(entry.path)
    if gone:
        # A file on a device that is not mounted says more than "missing".
        mounted = _mounted_devices()
        for index in gone:
            entry = pack.files[index]
            if entry.dev not in mounted:
                for reason in list(skipped):
                    if entry.path in skipped[reason]:
                        skipped[reason].remove(entry.path)
                        if not skipped[reason]:
                            del skipped[reason]
                skipped.setdefault(f"on device {entry.dev}, not mounted",
                                   []).append(entry.path)
    return keep, skipped


def file_devices(pack, keep):
    """The devices (MAJ:MIN) of the kept regular files: what the mode is
    chosen from (a device node's own st_dev is devtmpfs's)."""
    return {pack.files[i].dev for i in keep if not is_device(pack.files[i])}


def _kept_devices(pack):
    """The devices of the pack's regular files that are still the ones
    recorded."""
    found = set()
    for entry in pack.files:
        if is_device(entry) or entry.dev in found:
            continue
        try:
            if stale_reason(entry, os.stat(entry.path)) is None:
                found.add(entry.dev)
        except OSError:
            pass
    return found


def skipped_line(skipped, total):
    count = sum(len(p) for p in skipped.values())
    parts = [f"{len(paths)} {reason} ({_shown(paths)})"
             for reason, paths in skipped.items()]
    hint = ""
    if any(r.startswith("not readable") for r in skipped):
        hint = ("; the prefetch opens each file: run pagetrace launch as root "
                "or as the files' owner")
    return (f"{count} of {total} files not prefetched: " + "; ".join(parts)
            + hint + ("; record the pack again (pagetrace pack) or use --refine"
                      if count == total else ""))

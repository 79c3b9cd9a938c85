"""`pagetrace pack`: what its devices cost, measured (a random read, on a
file of the pack or on a whole disk), and the file system metadata a pack
holds on a disk that seeks (docs/prefetch-packs.md). Standard library only.
"""
import os
import time

from pagetrace.core import packfile, tracefile
from pagetrace.tools.launch_plan import SEEK_US


PROBE_READS = 16


def request_us(files, reads=PROBE_READS, seed=22):
    """{dev: median microseconds of one random 4 KiB O_DIRECT read} per
    device of the pack's files: what a request costs there, which the
    rotational flag does not say (a virtio disk says rotational 1
    whatever backs it). Measured over the whole device where its node can
    be opened (root; a drive's read-ahead buffer serves random reads
    within a small file without a seek), else on the largest file of the
    pack on it. Devices that refuse O_DIRECT (tmpfs) are left out."""
    largest = {}
    for f in files:
        if f.size >= 4096 and f.size > largest.get(f.dev, (0, ""))[0]:
            largest[f.dev] = (f.size, f.path)
    found = {}
    for dev, (size, path) in largest.items():
        node = device_node(f"/sys/dev/block/{dev}")
        us = random_read_us(*node, reads, seed) if node else None
        if us is None:
            us = random_read_us(path, size, reads, seed)
        if us is not None:
            found[dev] = us
    return found


def device_node(sysdir):
    """(/dev/NAME, size in bytes) of the block device at SYSDIR
    (/sys/dev/block/MAJ:MIN), or None."""
    try:
        with open(os.path.join(sysdir, "uevent")) as f:
            name = dict(line.strip().split("=", 1) for line in f if "=" in line)["DEVNAME"]
        with open(os.path.join(sysdir, "size")) as f:
            size = int(f.read()) * 512
    except (OSError, KeyError, ValueError):
        return None
    return (f"/dev/{name}", size) if size >= 4096 else None


def random_read_us(path, size, reads=PROBE_READS, seed=22):
    """The median microseconds of `reads` random 4 KiB O_DIRECT reads of
    the first `size` bytes of `path` (a file or a block device), or None
    when it cannot be read so."""
    import mmap
    import random
    rng = random.Random(seed)
    buffer = mmap.mmap(-1, 4096)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return None
    times = []
    try:
        for _ in range(reads):
            offset = rng.randrange(size // 4096) * 4096
            started = time.perf_counter()
            os.preadv(fd, [buffer], offset)
            times.append(time.perf_counter() - started)
    except OSError:
        times = []
    finally:
        os.close(fd)
    return round(sorted(times)[len(times) // 2] * 1e6) if times else None


def seeking_disks(read_ahead_paths, reads=8):
    """[(MAJ:MIN, us)] of the disks (their read_ahead_kb files in sysfs)
    whose random 4 KiB O_DIRECT read, over the whole disk, takes SEEK_US
    or more (the median of `reads`): a disk that seeks."""
    found = []
    for path in read_ahead_paths:
        sysdir = os.path.dirname(os.path.dirname(path))
        node = device_node(sysdir)
        us = random_read_us(*node, reads) if node else None
        if us is not None and us >= SEEK_US:
            found.append((os.path.basename(sysdir), us))
    return found


def metadata_reads(traces):
    """{(device node, offset): when} of the metadata pages the traces read
    (inode tables, directories, extent blocks: docs/trace-format.md), each
    at its earliest read, counted as first_accesses counts."""
    found = {}
    for number, trace in enumerate(traces):
        start = min((r.ts_us for r in trace.records), default=0)
        for order, r in enumerate(trace.records):
            if r.kind == "read" and tracefile.is_metadata(r.path):
                key, when = (r.path, r.offset), (r.ts_us - start, number, order, 0)
                if key not in found or when < found[key]:
                    found[key] = when
    return found


def seeking_metadata(traces, measured):
    """The metadata reads of the traces on the devices that seek (a random
    read measured at SEEK_US or more: `measured`, request_us's): a launch
    there reads them in disk order before the files, instead of the start
    (and the prefetch's own opens) reading them one seek at a time."""
    keep = {}
    for (path, offset), when in metadata_reads(traces).items():
        if path not in keep:
            try:
                keep[path] = measured.get(packfile.dev_text(os.stat(path).st_rdev),
                                          0) >= SEEK_US
            except OSError:
                keep[path] = False
    return {k: v for k, v in metadata_reads(traces).items() if keep[k[0]]}

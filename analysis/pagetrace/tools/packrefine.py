"""`pagetrace launch --refine`: trace the launch with `trace --used` and
add to the pack the pages the start read itself, as ureadahead's
--record-and-replay refines its pack while replaying it.

With the prefetch running, the pages it read are not the start's reads,
so what the trace adds is what the pack missed (pages no recorded run
used). Files that changed since the pack was made lose their old ranges
and get the pages this run used, under their new identity. A pack that
could not be used (too old, corrupt, another version) is replaced by the
list of this run alone. Standard library only (it runs under sudo).
"""
import os
import subprocess
import tempfile
import time

from pagetrace.core import packfile, tracefile
from pagetrace.core.c_tools import find_c_tool
from pagetrace.tools import packrecord
from pagetrace.tools.launch_files import check_files


def run_and_refine(args, command, pack, say):
    """Runs `command` under trace --used, updates the pack; CMD's status."""
    tracer = find_c_tool("trace")
    why = packrecord.recording_refusal() if tracer else \
        "the tracer is missing (tracer/trace: run make; or pagetrace-trace)"
    if why:
        say(f"warning: --refine: {why}: launching without recording")
        os.execvp(command[0], command)
    path = packfile.find_pack(args.pack)
    if pack is not None and pack.ranges is None:
        pack = packfile.read(path)  # the launch read only its files
    with tempfile.TemporaryDirectory(prefix="pagetrace-refine-") as work:
        log = os.path.join(work, "launch.log")
        status = subprocess.run([tracer, "--used", "-x", "-q", "--allow-lost",
                                 "-o", log, "--", *command]).returncode
        try:
            trace = tracefile.read(log)
        except tracefile.TraceError as err:
            say(f"warning: --refine: {err}: the pack is left as it was")
            return status
    refined, added = refine(pack, trace, say)
    if refined.ranges:
        packfile.write(refined, path)
        if not args.quiet:
            say(f"refined {packfile.escape(path)}: {added:,} pages added, "
                f"{len(refined.files)} files, run {refined.runs}")
    return status


def refine(pack, trace, say):
    """(the pack with the used pages of `trace` it lacked, pages added)."""
    new = packrecord.used_first_accesses([trace])
    files, ranges = [], []
    if pack is not None:
        keep, _ = check_files(pack)
        renumber = {}
        for index in keep:
            renumber[index] = len(files)
            files.append(pack.files[index])
        ranges = [r._replace(file=renumber[r.file]) for r in pack.ranges
                  if r.file in renumber]
        page_size = pack.page_size
        covered = {(files[r.file].path, (r.page + i) * page_size)
                   for r in ranges for i in range(r.pages)}
        new = {k: v for k, v in new.items() if k not in covered}
    page_size = pack.page_size if pack else trace.header.page_size
    index = {f.path: i for i, f in enumerate(files)}
    for path, page, count, ts in packrecord.group_ranges(new, page_size):
        if path not in index:
            try:
                files.append(packfile.identify(path))
                index[path] = len(files) - 1
            except OSError as err:
                say(f"warning: --refine: {packfile.escape(path)}: {err.strerror}")
                index[path] = None
        if index[path] is not None:
            ranges.append(packfile.PackRange(index[path], page, count, ts))
    ranges.sort(key=lambda r: r.ts_us)
    runs = (pack.runs if pack else 0) + 1
    refined = packfile.Pack(packfile.FORMAT_VERSION, page_size,
                            int(time.time()), pack.command if pack else
                            trace.header.keys.get("command", ""),
                            runs, pack.read_ahead_kb if pack else "unchanged",
                            files, ranges)
    return refined, len(new)

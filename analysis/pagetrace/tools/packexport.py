"""A pack's list in the forms container image builders take
(`pagetrace export PACK --format ...`):

  nydus-prefetch  the prefetch file of Nydus's image optimizer (nydus-image
                  optimize --prefetch-files; nydus-builder's
                  optimize_prefetch.rs): {"version": "v1", "files":
                  [{"path": ABSOLUTE, "ranges": [[offset, size], ...]}]},
                  files in first-access order, each file's ranges in file
                  order, adjacent ranges merged, the last clamped to the
                  file's size;
  file-list       one absolute path a line in first-access order, for the
                  builders that prefetch whole files (stargz-snapshotter's
                  prioritized files, SOCI).

--root DIR: the pack was recorded with the image's root filesystem at DIR
(a container's rootfs, or its layer directories, each a root: overlay's
lowerdir and upperdir); paths are written relative to the first root that
holds them, as the image names them, and files outside every root are
left out. Standard library only.
"""
import json

from pagetrace.core.escape import display_path


class ExportError(ValueError):
    pass


FORMATS = ("nydus-prefetch", "file-list")


def _roots(root):
    """The roots of --root: None, a directory, or a list of them, each
    possibly colon-separated."""
    if not root:
        return []
    given = [root] if isinstance(root, str) else root
    return [r.rstrip("/") for text in given for r in text.split(":") if r.strip("/")]


def _image_path(path, roots):
    if not roots:
        return path
    for root in roots:
        if path != root and path.startswith(root + "/"):
            return path[len(root):]
    return None


def file_ranges(pack, root=None):
    """[(image path, [[offset, size], ...])] in first-access order of the
    files; ranges in file order, adjacent ones merged, clamped to size."""
    order, ranges, roots = [], {}, _roots(root)
    for r in pack.ranges:
        if r.file not in ranges:
            order.append(r.file)
            ranges[r.file] = []
        ranges[r.file].append((r.page, r.pages))
    out = []
    for index in order:
        entry = pack.files[index]
        path = _image_path(entry.path, roots)
        if path is None:
            continue
        merged = []
        for page, pages in sorted(ranges[index]):
            start, end = page * pack.page_size, (page + pages) * pack.page_size
            end = min(end, entry.size)
            if start >= end:
                continue
            if merged and merged[-1][0] + merged[-1][1] >= start:
                merged[-1][1] = max(merged[-1][1], end - merged[-1][0])
            else:
                merged.append([start, end - start])
        out.append((path, merged))
    return out


def nydus_prefetch(pack, root=None):
    return {"version": "v1",
            "files": [{"path": path, "ranges": ranges}
                      for path, ranges in file_ranges(pack, root) if ranges]}


def file_list(pack, root=None, warn=print):
    lines = []
    for path, ranges in file_ranges(pack, root):
        if "\n" in path:
            warn(f"{display_path(path)}: a name with a newline cannot be one "
                 "line of a file list: left out")
            continue
        lines.append(path + "\n")
    return "".join(lines)


def write(pack, form, out, root=None, warn=print):
    if form == "nydus-prefetch":
        json.dump(nydus_prefetch(pack, root), out, indent=1)
        out.write("\n")
    elif form == "file-list":
        out.write(file_list(pack, root, warn))
    else:
        raise ExportError(f"unknown format {form}: choose from {', '.join(FORMATS)}")

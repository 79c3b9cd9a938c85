"""A deliberately small, independent reader of trace format v1 (and v2's
read records) for the
tests: the oracle for what the tools write must not be the code under test
elsewhere in the project (replay's C parser, the pagetrace package)."""
import re

from pagecache_util import PAGE


def _unescape(field):
    return re.sub(rb"\\([0-3][0-7]{2})", lambda m: bytes([int(m.group(1), 8)]),
                  field.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


class Trace:
    def __init__(self, text):
        self.header, self.trailer, self.records = {}, None, []
        for line in text.splitlines():
            if line.startswith("# end: "):
                self.trailer = dict(kv.split("=") for kv in line[7:].split())
            elif line.startswith("# ") and ": " in line:
                key, value = line[2:].split(": ", 1)
                self.header.setdefault(key, value)
            elif line and not line.startswith("#"):
                fields = line.split()
                self.records.append((int(fields[0]), _unescape(fields[1]),
                                     int(fields[2]), fields[3:]))

    @property
    def read_records(self):
        """The records of pages read from storage: all of a version 1 trace;
        in version 2 those whose kind (field 4) is read, not access or map."""
        if self.header.get("columns", "").split()[3:4] != ["kind"]:
            return self.records
        return [r for r in self.records if r[3][0] == "read"]

    def pages(self, path):
        return [off // PAGE for _, p, off, _ in self.records if p == path]

    def page_set(self, path):
        return set(self.pages(path))

    def paths(self):
        return {p for _, p, _, _ in self.records}

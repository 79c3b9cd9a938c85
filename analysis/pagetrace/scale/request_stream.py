"""Requests and seeks over a run's records in trace order, streamed in
batches from Parquet (RequestStream): what `seeks` and `summary` count out
of core, as analysis/metrics.py counts them in memory."""
from pagetrace.scale import libs
# --- seeks ------------------------------------------------------------------

class RequestStream:
    """Requests (replay's grouping, metrics.group_requests) and their seeks
    (metrics.file_seeks) over pages given in order, a batch at a time, with
    the HDD and SSD models' times (model.predict_requests): the in-memory
    figures without holding the pages. A run of adjacent pages that
    crosses a batch boundary is one run."""

    def __init__(self, page_size, max_request_bytes=1 << 20, hdd=None,
                 ssd=None):
        from pagetrace.analysis.model import HDDModel, SSDModel
        self.page_size = page_size
        self.max_pages = max(1, max_request_bytes // page_size)
        self.hdd, self.ssd = hdd or HDDModel(), ssd or SSDModel()
        self.pages = self.requests = self.seeks = self.switches = 0
        self.distance = 0
        self.positioning_ms = 0.0
        self.prev_path = self.prev_offset = None
        self.run_length = 0

    def add(self, path, offset):
        """path: an arrow array of paths (binary, or dictionary-encoded);
        offset: a numpy uint64 array of the same length."""
        pa = libs.pyarrow()
        if len(offset) == 0:
            return
        if not pa.types.is_dictionary(path.type):
            path = pa.compute.dictionary_encode(path)
        codes = path.indices.to_numpy(zero_copy_only=False)
        self.add_codes(codes, offset, path.dictionary[codes[0]].as_py(),
                       path.dictionary[codes[-1]].as_py())

    def add_codes(self, codes, offset, first_path, last_path):
        """The same with the paths as numbers (equal numbers, same file)
        and the first and last rows' paths as anything that compares as
        the path does across batches."""
        import numpy as np
        n = len(offset)
        if n == 0:
            return
        same_file = np.empty(n, dtype=bool)
        same_file[0] = self.prev_path is not None and \
            first_path == self.prev_path
        same_file[1:] = codes[1:] == codes[:-1]
        end = np.empty(n, dtype=np.uint64)
        end[0] = (self.prev_offset if self.prev_offset is not None
                  else 0) + self.page_size
        np.add(offset[:-1], np.uint64(self.page_size), out=end[1:])
        # A run of adjacent pages of one file starts where the page does not
        # follow the one before; rows before the first start continue the
        # previous batch's run, which is run_length pages long so far.
        starts = np.flatnonzero((offset != end) | ~same_file)
        cut = int(starts[0]) if len(starts) else n
        pages = self.max_pages
        # Requests: a run of L pages is split every max_pages pages
        # (metrics.group_requests): ceil(L / max_pages) of them, and the
        # continued run adds those that start in this batch.
        lengths = np.diff(np.append(starts, n))
        self.requests += int(((lengths + pages - 1) // pages).sum())
        if cut:
            done = self.run_length
            self.requests += (done + cut - 1) // pages - (done - 1) // pages
        self.run_length = n - int(starts[-1]) if len(starts) else \
            self.run_length + n
        if self.prev_path is None:
            # The trace's first request: not a seek in metrics.file_seeks,
            # but the head's position is unknown to the HDD model.
            starts = starts[1:]
            self._position(np.array([np.nan]))
        same = same_file[starts]
        jump = starts[same]
        distance = np.where(offset[jump] >= end[jump], offset[jump] -
                            end[jump], end[jump] - offset[jump])
        switches = len(starts) - len(jump)
        self.seeks += len(starts)
        self.switches += switches
        self.distance += int(distance.sum(dtype=np.uint64))
        self._position(np.concatenate([distance.astype(float),
                                       np.full(switches, np.nan)]))
        self.pages += n
        self.prev_path = last_path
        self.prev_offset = int(offset[-1])

    def _position(self, distances):
        if len(distances):
            self.positioning_ms += float(
                (self.hdd.seek_ms(distances)
                 + self.hdd.rotational_latency_ms).sum())

    def summary(self):
        """model.predict_requests's and the seek report's figures."""
        nbytes = self.pages * self.page_size
        hdd_ms = (self.requests * self.hdd.per_request_ms
                  + self.positioning_ms
                  + nbytes / self.hdd.transfer_bytes_per_s * 1e3)
        return {"requests": self.requests, "bytes": nbytes,
                "seeks": self.seeks, "seek_distance_bytes": self.distance,
                "unknown_distance_seeks": self.switches,
                "file_switches": self.switches, "hdd_s": hdd_ms / 1e3,
                "ssd_s": self.requests * self.ssd.per_request_ms / 1e3
                + nbytes / self.ssd.bandwidth_bytes_per_s}


def trace_order(part, page_size, max_request_bytes=1 << 20, hdd=None,
                ssd=None):
    """RequestStream over the read records of one part file in trace order,
    one row group at a time."""
    pa = libs.pyarrow()
    stream = RequestStream(page_size, max_request_bytes, hdd, ssd)
    parquet = pa.parquet.ParquetFile(part, read_dictionary=["path"],
                                     pre_buffer=False)
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group, columns=["path", "offset",
                                                       "kind"])
        table = table.filter(pa.compute.equal(table.column("kind"), "read"))
        table = table.unify_dictionaries().combine_chunks()
        if table.num_rows:
            stream.add(table.column("path").chunk(0),
                       table.column("offset").to_numpy())
    return stream

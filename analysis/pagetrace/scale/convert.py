"""Traces as a Parquet dataset, converted in bounded memory (issue 12).

`convert` turns text traces (any size, `.xz`/`.gz` too) into one Parquet
dataset, a directory with one hive-style partition per run:

    DIR/run=RUN/part-0.parquet

so that a directory of runs is one table for DuckDB (`read_parquet(
'DIR/*/*.parquet', hive_partitioning = true)`) or Spark
(`spark.read.parquet('DIR')`). The schema, documented in docs/scale.md:

    line          uint64   1-based line of the record in its trace
    timestamp_us  uint64
    path          binary   the file name's bytes, unescaped
    offset        uint64
    kind          string   read / access / map (`read` in a version 1 trace)
    page_size     uint32   the trace's page-size, on every row
    <extras>      binary   the trace's extra columns (trace -x), unescaped
    run           string   from the directory name (partition key)

Records are checked exactly as the reader contract says (docs/trace-format.md,
"Readers"), block by block in bounded memory, by converter.py.

The same pass computes what `pagetrace summary` says of the run
(SummaryPass) and writes it beside the part file as `_summary.json`, tied
to the file's size and SHA-256; `summary` uses it only for that file and
otherwise asks DuckDB (docs/scale.md).
"""
import collections
import concurrent.futures
import lzma
import os
import shutil
import warnings

from pagetrace.core import tracefile
from pagetrace.scale.converter import (BLOCK_BYTES, PART_NAME, _blocks,
                                        _Converter, _open, _trailers)
from pagetrace.scale.libs import DatasetError
from pagetrace.scale.summary_pass import write_summary

def run_name(path):
    """Default run id of a trace: its file name without extensions."""
    return os.path.basename(str(path)).split(".")[0] or "run"


class ConvertResult:
    def __init__(self, source, run, path, records, header, malformed,
                 n_malformed, trailer, surplus, malformed_lines=()):
        self.source, self.run, self.path = source, run, path
        self.records, self.header = records, header
        self.malformed, self.n_malformed = malformed, n_malformed
        self.trailer, self.surplus = trailer, surplus
        self.malformed_lines = list(malformed_lines)

    def messages(self, surplus=True):
        """Warnings in the core reader's form: FILE:LINE: reason; with
        `surplus`, also say that fields beyond the declared columns were
        not kept (which matters only for a dataset that is kept)."""
        out = [f"{self.source}:{line}: {reason}"
               for line, reason in self.malformed]
        if self.n_malformed > len(self.malformed):
            out.append(f"{self.source}: {self.n_malformed - len(self.malformed)}"
                       " more malformed lines")
        lost = (self.trailer or {}).get("lost", 0)
        if lost:
            out.append(f"{self.source}: the tracer lost {lost} events; "
                       "the trace is incomplete")
        if surplus and self.surplus:
            out.append(f"{self.source}: {self.surplus} records have more "
                       "fields than the columns header declares; Parquet "
                       "keeps the declared ones")
        return out


def convert_trace(source, out_dir, run=None, strict=False,
                  block_bytes=BLOCK_BYTES, summarise=True):
    """Convert one text trace into DIR/run=RUN/part-0.parquet.

    Returns a ConvertResult. Raises tracefile.TraceError (naming the file)
    for a trace the reader contract refuses; nothing is left behind then.
    With `strict`, the first malformed record raises MalformedTraceError.
    """
    source = os.fsdecode(source)
    run = run or run_name(source)
    if "/" in run or run in ("", ".", ".."):
        raise DatasetError(f"{source}: bad run id '{run}'")
    final_dir = os.path.join(out_dir, f"run={run}")
    tmp_dir = os.path.join(out_dir, f".run={run}.tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    converter = None
    try:
        with _open(source) as stream:
            blocks = _blocks(stream, block_bytes)
            head, header = _read_head(blocks, source)
            converter = _Converter(header, os.path.join(tmp_dir, PART_NAME),
                                   run, summarise)
            _trailers(head[:header.body_start], header,
                      converter._set_trailer)
            first = head[header.body_start:]
            _convert_blocks(converter, _with_last(first, blocks), source,
                            strict)
        converter.close()
        if converter.summary is not None and converter.summary.valid:
            write_summary(converter.summary,
                          os.path.join(tmp_dir, PART_NAME))
        shutil.rmtree(final_dir, ignore_errors=True)
        os.rename(tmp_dir, final_dir)
    except (lzma.LZMAError, EOFError) as err:
        _discard(converter, tmp_dir)
        raise tracefile.TraceError(source, f"cannot decompress: {err}") \
            from None
    except OSError as err:
        _discard(converter, tmp_dir)
        raise tracefile.TraceError(source, err.strerror or str(err)) \
            from None
    except BaseException:
        _discard(converter, tmp_dir)
        raise
    return ConvertResult(source, run, os.path.join(final_dir, PART_NAME),
                         converter.records, header, converter.malformed,
                         converter.n_malformed, converter.trailer,
                         converter.surplus,
                         sorted(converter.malformed_lines))


# Blocks parsed at once, each in a thread of its own (the fast path is
# arrow's, which releases the GIL); the checks and writes stay in order.
PARSE_THREADS = 2


def _with_last(first, blocks):
    """(block, last) for `first` and then every block."""
    pending = first
    for block in blocks:
        yield pending, False
        pending = block
    yield pending, True


def _convert_blocks(converter, blocks, source, strict):
    """Parse up to PARSE_THREADS blocks ahead while the converter takes
    them in order."""
    pool = concurrent.futures.ThreadPoolExecutor(PARSE_THREADS)
    ahead = collections.deque()
    try:
        for block in blocks:
            ahead.append(pool.submit(converter.parse, *block))
            if len(ahead) > PARSE_THREADS:
                converter.add_parsed(*ahead.popleft().result())
                _raise_strict(converter, source, strict)
        while ahead:
            converter.add_parsed(*ahead.popleft().result())
            _raise_strict(converter, source, strict)
    finally:
        for future in ahead:
            future.cancel()
        pool.shutdown(wait=True)


def _read_head(blocks, source):
    """(first bytes, header): blocks are joined until the header block is
    complete (a record line follows it, or the file ends), so that a key
    in a later block is not missed."""
    head = bytes(next(blocks, b""))
    while True:
        try:
            header = tracefile.read_header(head, source)
        except tracefile.TraceError:
            header = None
        if header is not None and header.body_start < len(head):
            return head, header
        more = next(blocks, None)
        if more is None:
            # The whole file is header: read it again for its verdict.
            return head, tracefile.read_header(head, source)
        head += bytes(more)


def _discard(converter, tmp_dir):
    if converter is not None:
        try:
            converter.close()
        except Exception:  # noqa: BLE001 (already failing)
            pass
    shutil.rmtree(tmp_dir, ignore_errors=True)


def _raise_strict(converter, source, strict):
    if strict and converter.malformed:
        raise tracefile.MalformedTraceError(source, *converter.malformed[0])


def convert(sources, out_dir, runs=None, strict=False, report=None,
            kept=True, summarise=True):
    """Convert several traces into one dataset; a trace that fails is
    reported through `report(message)` and the others go on. Returns the
    list of ConvertResults of the traces converted."""
    report = report or (lambda message: warnings.warn(message))
    os.makedirs(out_dir, exist_ok=True)
    results, seen = [], set()
    for index, source in enumerate(sources):
        run = runs[index] if runs else run_name(source)
        if run in seen:
            report(f"{source}: run id {run!r} already taken by another "
                   "trace of this conversion; name the runs apart")
            continue
        seen.add(run)
        try:
            result = convert_trace(source, out_dir, run, strict=strict,
                                   summarise=summarise)
        except (tracefile.TraceError, DatasetError) as err:
            report(str(err))
            continue
        for message in result.messages(surplus=kept):
            report(message)
        results.append(result)
    return results

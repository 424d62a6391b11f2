"""A fragment's column file: its output values laid out at their physical rows, written as one Lance data file.

Two stages end in one: the apply, for a fragment it computed whole in one task (the file straight from the
rows it computed), and the writer, for a fragment computed in batch checkpoints (the file from those).
Either way the file is staged -- recorded in the store, one record for many fragments -- before the driver
commits it, so a rerun commits it again instead of computing or writing it again.
"""

from __future__ import annotations

import os
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from geneva_provider.core.contracts.models import DataFileRef, FileTarget, FragmentCheckpoint, StagedFiles
from geneva_provider.core.store.checkpoint import ROWADDR, CheckpointStore
from geneva_provider.core.store.layout import JobStore
from geneva_provider.pipeline.stages.context import StageContext

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Fragment

STAGED_PER_RECORD = 256  # staged files per record: one small document for many fragments
# Column files written at once by a partition (threads: Lance's writer releases the GIL).  A task that computes
# many small fragments whole writes one file each, and the file's open and close, not its rows, are most of its
# cost (issue 44: 1,000 fragments of 100 rows); the Lance floor writes them so too.
WRITER_THREADS = max(1, min(4, os.cpu_count() or 1))

_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process that made it: a forked worker makes its own)


def _writers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="geneva-file-writer"))
    return _pool[1]


class Stager:
    """Collects the files one Spark partition staged and records them in the store, many to a record.

    Files are written by :data:`WRITER_THREADS` threads while the task computes on (:meth:`stage_written`), at
    most twice that many in flight.  A record is written every ``STAGED_PER_RECORD`` files; :meth:`flush` waits
    for the files in flight and writes the rest, before the driver sees (and commits) any of them.
    """

    def __init__(self, ctx: StageContext, store: CheckpointStore) -> None:
        self.ctx, self.store = ctx, store
        self.staged: dict[int, FragmentCheckpoint] = {}
        self.writing: deque[Future[tuple[int, FragmentCheckpoint]]] = deque()

    @property
    def pending(self) -> bool:
        """Whether files are written or staged but not recorded yet."""
        return bool(self.staged or self.writing)

    def stage_written(self, fid: int, write: Callable[[], FragmentCheckpoint]) -> None:
        """Stages fragment ``fid``'s file once ``write()`` has written it, in a writer thread."""
        self.writing.append(_writers().submit(lambda: (fid, write())))
        while len(self.writing) > 2 * WRITER_THREADS:
            self.stage(*self.writing.popleft().result())

    def stage(self, fid: int, ckpt: FragmentCheckpoint) -> None:
        self.staged[fid] = ckpt
        if len(self.staged) >= STAGED_PER_RECORD:
            self.flush()

    def flush(self) -> None:
        """Waits for the files in flight; writes the staged files not yet recorded (a file that failed raises)."""
        while self.writing:
            fid, ckpt = self.writing.popleft().result()
            self.staged[fid] = ckpt
        if self.staged:
            JobStore(self.store).put_staged(self.ctx.job.job_prefix, StagedFiles(files=self.staged))
            self.staged = {}


def write_column_file(ctx: StageContext, frag: Fragment, new: pa.Table, target: FileTarget, rows: int,
                      fields: list[pa.Field]) -> FragmentCheckpoint:
    """Writes a fragment's output file from newly computed rows (``new``: row addresses and output columns).

    Every live row keeps its current value and fingerprint unless ``new`` holds a newer one, so rows a
    filter left out, and rows whose value was still valid, are carried over unchanged; deleted rows are
    NULL.  A row the UDF's error policy skipped has no fingerprint: the fragment is then not all valid,
    and a value computed for the row by a later run wins over the skipped one (later wins below).
    """
    from lance.file import LanceFileWriter

    job = ctx.job
    valid = new.column(job.row_fingerprint_column).is_valid()
    complete = target.complete and pc.all(valid).as_py() is not False
    if not complete:
        new = pa.concat_tables([new.filter(pc.invert(valid)), new.filter(valid)])
    if target.base_file:
        # Rows not recomputed keep their current values: merge them in under the new ones.
        current = frag.to_table(columns=job.output_columns, with_row_address=True)
        new = pa.concat_tables([current.select(new.column_names).cast(new.schema), new])
    index = physical_index(target.physical_rows, new.column(ROWADDR).combine_chunks())
    arrays = [new.column(f.name).combine_chunks() for f in fields]
    if index is not None:
        arrays = [a.take(index) for a in arrays]

    rel = f"{uuid.uuid4().hex}.lance"
    schema = pa.schema([f.remove_metadata() for f in fields])
    with LanceFileWriter(os.path.join(job.table_uri, "data", rel), schema,
                         version=job.data_storage_version, storage_options=ctx.storage_options) as w:
        w.write_batch(pa.record_batch(arrays, schema=schema))
    major, minor = (int(p) for p in job.data_storage_version.split("."))
    leaves = job.output_field_ids
    datafile = DataFileRef(path=rel, fields=leaves, column_indices=list(range(len(leaves))),
                           file_major_version=major, file_minor_version=minor, file_size_bytes=w.size_bytes)
    return FragmentCheckpoint(
        file=datafile, src_data_files=target.src_files, output_field_ids=leaves, column_uid=job.column_uid,
        base_file=target.base_file, rows=rows, where=job.where, complete=complete, job_id=ctx.job_id)


def physical_index(physical_rows: int, addrs: pa.Array) -> pa.Array | None:
    """For each physical row, which element of ``addrs`` holds its value (NULL: none).  Later wins on repeats.

    ``values.take(index)`` then places values at their rows' physical offsets, NULL elsewhere.  None when
    ``addrs`` already are every physical row in order (a whole fragment without deletions): the values
    are in place as they are, and a take would only copy them.
    """
    offsets = (addrs.to_numpy(zero_copy_only=False) & np.uint64(0xFFFFFFFF)).view(np.int64)  # below 2**32: exact
    if len(offsets) and offsets.max() >= physical_rows:
        raise ValueError(f"row offset {offsets.max()} beyond the fragment's {physical_rows} physical rows")
    ascending = bool(len(offsets)) and bool(np.all(offsets[1:] > offsets[:-1]))  # sorted, no repeats: the usual
    if ascending and len(offsets) == physical_rows:  # n ascending offsets below n: exactly 0, 1, ..., n - 1
        return None
    idx = np.full(physical_rows, -1, dtype=np.int64)
    if ascending:
        idx[offsets] = np.arange(len(offsets))
    else:
        # The last occurrence of an offset wins (explicitly: numpy does not order repeated assignments).
        uniq, first_in_reversed = np.unique(offsets[::-1], return_index=True)
        idx[uniq] = len(offsets) - 1 - first_in_reversed
    return pa.array(idx, mask=idx < 0)

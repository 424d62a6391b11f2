"""The shortcuts a cheap vectorised backfill takes (issue 28's 10M-row benchmark), held to the general paths.

A UDF call's marker names the fragments of its rows in one pass; write+commit skips its take and
its missing-row scan when a fragment's checkpoints hold exactly its planned rows in order; checkpoint
stores write Lance 2.0 files and still read what older stores wrote.  No Spark: each shortcut is
compared with what the general path gives on the same input.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader, LanceFileWriter

from geneva_provider.core.store.checkpoint import FILE_VERSION, KEY_SUFFIX, ROWADDR, LanceCheckpointStore
from geneva_provider.pipeline.columns.files import physical_index
from geneva_provider.pipeline.columns.write import _missing_rows
from geneva_provider.pipeline.spark.worker_deaths import fragments_of


def addresses(frag: int, offsets: list[int] | range) -> np.ndarray:
    return (np.uint64(frag) << np.uint64(32)) + np.asarray(offsets, dtype=np.uint64)


@pytest.mark.parametrize("runs", [
    [(4, range(0, 1_000))],                                           # one fragment
    [(2, range(500, 600)), (3, range(0, 10)), (9, range(7, 8))],     # a chunk over the parts of small fragments
    [(7, range(0, 5)), (1, range(0, 5)), (7, range(10, 12))],        # fragments out of order, one twice
    [(0, [0]), (2**31, [4_294_967_295])],                            # the extremes of both halves of an address
])
def test_a_calls_fragments_are_every_fragment_of_its_rows_ascending(runs):
    addrs = np.concatenate([addresses(frag, offsets) for frag, offsets in runs])
    expected = sorted({frag for frag, _ in runs})
    assert fragments_of(addrs) == expected == [int(f) for f in np.unique(addrs >> np.uint64(32))]
    assert fragments_of([int(a) for a in addrs]) == expected  # a UDTF passes its parents' addresses as a list


def test_every_physical_row_in_order_needs_no_placing():
    assert physical_index(5, pa.array(addresses(3, range(5)))) is None
    assert physical_index(0, pa.array([], pa.uint64())).to_pylist() == []


@pytest.mark.parametrize(("physical_rows", "offsets", "index"), [
    (7, [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, None, None]),         # rows past the checkpoints: NULL
    (5, [0, 1, 3, 4], [0, 1, None, 2, 3]),                     # a deleted row: NULL
    (3, [2, 1, 0], [2, 1, 0]),                                 # every row, out of order: placed
    (3, [0, 1, 2, 1], [0, 3, 2]),                              # a repeat: the later value wins
])
def test_other_rows_are_placed_at_their_physical_offsets(physical_rows, offsets, index):
    assert physical_index(physical_rows, pa.array(addresses(6, offsets))).to_pylist() == index


def checkpointed(*chunks: list[int]) -> pa.ChunkedArray:
    """The row addresses a fragment's checkpoints hold, one chunk per checkpoint (fragment 5)."""
    return pa.chunked_array([pa.array(addresses(5, c)) for c in chunks], pa.uint64())


@pytest.mark.parametrize(("needed", "held", "missing"), [
    ([0, 1, 2, 3], checkpointed([0, 1], [2, 3]), []),          # the planned rows, in order: the shortcut
    ([0, 1, 2, 3], checkpointed([2, 3], [0, 1]), []),          # the same rows in another order
    ([0, 1, 2, 3], checkpointed([0, 1], [3]), [2]),            # a row no checkpoint holds
    ([1, 3], checkpointed([0, 1, 2, 3]), []),                  # more rows held than planned (a where)
    ([0, 1, 2], checkpointed([0, 1, 2, 2]), []),               # a row held twice (a retried checkpoint)
    ([0, 1, 2], checkpointed([0, 1, 1]), [2]),                 # as many rows as planned, but not those rows
    ([0, 1], checkpointed(), [0, 1]),
])
def test_missing_rows_are_the_planned_rows_no_checkpoint_holds(needed, held, missing):
    found = _missing_rows(addresses(5, needed), held, physical_rows=4)
    assert found.tolist() == addresses(5, missing).tolist()


def footer_version(path: object) -> tuple[int, int]:
    meta = LanceFileReader(str(path)).metadata()
    return meta.major_version, meta.minor_version


def test_checkpoints_are_lance_2_0_files_and_older_ones_still_read(tmp_path):
    store = LanceCheckpointStore(str(tmp_path / "store"))
    batch = pa.table({ROWADDR: pa.array(addresses(1, range(1_000))), "y": pa.array(np.arange(1_000) * 2)})
    store["new"] = batch
    assert FILE_VERSION == "2.0"
    assert footer_version(tmp_path / "store" / f"new{KEY_SUFFIX}") == (0, 3)  # how a 2.0 file's footer says 2.0
    assert store["new"].equals(batch)
    # A checkpoint an earlier version of the package wrote (pylance's default file version) reads the same.
    with LanceFileWriter(os.path.join(str(tmp_path / "store"), f"old{KEY_SUFFIX}"), batch.schema) as w:
        w.write_batch(batch.to_batches()[0])
    assert footer_version(tmp_path / "store" / f"old{KEY_SUFFIX}") >= (2, 1)
    assert store["old"].equals(batch)
    assert store.get_columns("old", [ROWADDR]).column(ROWADDR).equals(batch.column(ROWADDR))

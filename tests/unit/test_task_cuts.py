"""Whether a plan splits a fragment over tasks: only where the measured cost of its rows says a split can pay."""

from __future__ import annotations

import pyarrow as pa
import pytest

from geneva_provider.core.ranges import pack_tasks
from geneva_provider.pipeline.stages.on_driver import VARIABLE_WIDTH_BYTES, value_bytes
from geneva_provider.pipeline.stages.task_cuts import SPLIT_COST_SECONDS, TASKS_PER_SLOT, cut_tasks, whole_fragments


def _never() -> float | None:
    raise AssertionError("the measured cost was asked for although no fragment is split")


def _covers_each_fragment_whole(pieces, work) -> None:
    parts = sorted(p for piece in pieces for p in piece)
    assert parts == sorted((fid, 0, n) for fid, n in work)


def test_an_unmeasured_column_keeps_the_guided_split_of_a_large_fragment():
    work = [(7, 100_000)]
    pieces = cut_tasks(work, 2, 1_000, None, lambda: None)
    assert pieces == pack_tasks(work, 2, 1_000) and len(pieces) > 1  # split over the slots, as before


def test_a_cheaply_measured_column_keeps_every_fragment_whole():
    work = [(7, 100_000), (8, 30_000)]
    cheap = SPLIT_COST_SECONDS / 100_000 / 2  # the largest fragment costs half a split
    pieces = cut_tasks(work, 2, 1_000, None, lambda: cheap)
    _covers_each_fragment_whole(pieces, work)
    assert pack_tasks(work, 2, 1_000) != pieces  # the guided cut would have split fragment 7


def test_an_expensively_measured_column_is_split_as_before():
    work = [(7, 100_000)]
    dear = 2 * SPLIT_COST_SECONDS / 100_000  # computing the fragment costs twice a split
    assert cut_tasks(work, 2, 1_000, None, lambda: dear) == pack_tasks(work, 2, 1_000)


def test_the_cost_is_not_read_when_no_fragment_is_split_or_the_task_size_is_fixed():
    small = [(i, 100) for i in range(50)]  # tiny fragments are packed whole anyway
    assert cut_tasks(small, 2, 1_000, None, _never) == pack_tasks(small, 2, 1_000)
    large = [(0, 100_000)]
    assert cut_tasks(large, 2, 1_000, 10_000, _never) == pack_tasks(large, 2, 1_000, 10_000)


@pytest.mark.parametrize("fragments", [[500_000] * 20, [100_000], [9, 1_000, 40_000, 7, 7, 300, 52_000]])
def test_whole_fragments_are_dealt_over_a_few_tasks_a_slot_evenly(fragments):
    work = list(enumerate(fragments))
    pieces = whole_fragments(work, 2)
    _covers_each_fragment_whole(pieces, work)
    assert len(pieces) == min(len(work), TASKS_PER_SLOT * 2)
    loads = [sum(b - a for _, a, b in p) for p in pieces]
    assert loads == sorted(loads, reverse=True)  # the largest tasks start first
    assert loads[0] - loads[-1] <= max(fragments)  # no task holds more than a fragment beyond another


def test_the_bytes_a_value_is_counted_for_the_driver_write_threshold():
    assert value_bytes(pa.int64()) == 8 and value_bytes(pa.bool_()) == 1
    assert value_bytes(pa.list_(pa.float32(), 1536)) == 4 * 1536  # an embedding
    assert value_bytes(pa.struct([("a", pa.int32()), ("b", pa.float64())])) == 12
    assert value_bytes(pa.string()) == value_bytes(pa.list_(pa.int8())) == VARIABLE_WIDTH_BYTES

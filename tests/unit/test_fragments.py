"""The fragment and field look-ups of core/fragments.py on a real Lance table.

Lance answers None for a column or a fragment it does not have; the stages look them up through
these helpers so a missing one is an error naming it, not an AttributeError on None later.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from geneva_provider.core.fragments import (
    column_field,
    column_field_ids,
    column_leaf_ids,
    fragment_of,
    leaf_field_ids,
    live_row_addresses,
)


@pytest.fixture
def ds(tmp_path):
    table = pa.table({"x": pa.array([1, 2, 3, 4], pa.int64()),
                      "s": pa.array([{"a": 1, "b": "u"}] * 4, pa.struct([("a", pa.int64()), ("b", pa.string())]))})
    lance.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=2)
    return lance.dataset(str(tmp_path / "t.lance"))


def test_a_column_field_and_its_ids(ds):
    assert column_field(ds, "x").name() == "x"
    assert column_leaf_ids(ds, "x") == leaf_field_ids(ds.lance_schema.field("x")) == [0]
    assert column_leaf_ids(ds, "s") == [2, 3]           # the struct's leaves, not the struct itself
    assert column_field_ids(ds, "s") == [1, 2, 3]       # the struct and its children


def test_a_missing_column_is_a_lookup_error_naming_it(ds):
    with pytest.raises(LookupError, match=r"column 'nope' not found in .*t\.lance at version 1"):
        column_leaf_ids(ds, "nope")
    with pytest.raises(LookupError, match="column 'nope'"):
        column_field_ids(ds, "nope")


def test_a_fragment_and_a_missing_one(ds):
    frag = fragment_of(ds, 1)
    assert frag.fragment_id == 1
    assert list(live_row_addresses(frag)) == [(1 << 32), (1 << 32) + 1]
    with pytest.raises(LookupError, match=r"fragment 7 not found in .*t\.lance at version 1"):
        fragment_of(ds, 7)

"""Schema changes through the pipeline's builder: UDF columns come and go with their fingerprint columns, a
UDF swap keeps the column's identity, and a change that had landed is not made again.

``Table.add_columns`` / ``drop_columns`` and ``retry_failed``'s swap are thin calls of ``UpdateColumns``;
these tests drive the builder itself on a real Lance table, concurrent writers included.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.fingerprints import fingerprint_column, holds_fingerprints_of
from geneva_provider.core.functions.udf import load_udf, udf_column_info
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.schema_changes import UpdateColumns

FP_Y, FP_Z = fingerprint_column("y"), fingerprint_column("z")


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return 2 * x


@gp.udf(data_type=pa.int64(), name="double")
def double_fixed(x: int) -> int:
    return 2 * x if x != 3 else 6


@gp.udf(data_type=pa.float64())
def halve(x: int) -> float:
    return x / 2


@pytest.fixture
def table(tmp_path) -> TableRef:
    uri = str(tmp_path / "events.lance")
    lance.write_dataset(pa.table({"x": list(range(6))}), uri, max_rows_per_file=3, enable_stable_row_ids=True)
    return TableRef("events", uri)


def _names(ref: TableRef) -> list[str]:
    return ref.dataset().schema.names


def test_adding_udf_columns_adds_each_with_its_fingerprint_column_in_one_commit(table):
    start = table.dataset().version
    version = UpdateColumns(table).add_udf_column("y", double).add_udf_column("z", halve, ["y"]).commit()
    ds = table.dataset()
    assert version == ds.version == start + 1
    assert ds.schema.names == ["x", "y", FP_Y, "z", FP_Z]
    assert holds_fingerprints_of(ds.schema.field(FP_Y), "y") and holds_fingerprints_of(ds.schema.field(FP_Z), "z")
    y, z = (udf_column_info(ds.schema.field(c).metadata) for c in ("y", "z"))
    assert (y.name, y.input_columns, z.name, z.input_columns) == ("double", ["x"], "halve", ["y"])
    assert ds.count_rows("y IS NULL AND z IS NULL") == 6  # metadata only: values wait for a backfill


def test_a_bad_column_fails_before_anything_is_committed(table):
    start = table.dataset().version
    update = UpdateColumns(table, subject="add_columns on table 'events'").add_udf_column("y", double)
    with pytest.raises(ColumnError, match=r"column 'z': UDF 'halve' reads \['nope'\], not found in table 'events'"):
        update.add_udf_column("z", halve, ["nope"])
    with pytest.raises(ColumnError, match=r"column 'y' already exists in table 'events'"):
        update.add_udf_column("y", halve)  # added earlier in the same change
    with pytest.raises(InvalidArgumentError, match=r"add_columns on table 'events': column name '__geneva_fp__q'"):
        update.add_udf_column(fingerprint_column("q"), double)
    assert table.dataset().version == start


def test_dropping_a_udf_column_drops_its_fingerprint_column_and_a_reader_of_it_is_refused(table):
    UpdateColumns(table).add_udf_column("y", double).add_udf_column("z", halve, ["y"]).commit()
    with pytest.raises(ColumnError, match=r"cannot drop \['y'\] from table 'events': UDF column 'z' reads them"):
        UpdateColumns(table).drop_columns(["y"])
    with pytest.raises(ColumnError, match=r"cannot drop \['__geneva_fp__y'\] from table 'events'"):
        UpdateColumns(table).drop_columns([FP_Y])
    with pytest.raises(InvalidArgumentError, match=r"drop_columns on table 'events': cannot drop every column"):
        UpdateColumns(table, subject="drop_columns on table 'events'").drop_columns(["x", "y", "z"])
    version = UpdateColumns(table).drop_columns(["y", "z"]).commit()
    assert _names(table) == ["x"] and version == table.dataset().version


def test_a_fingerprint_column_left_behind_by_a_drop_outside_the_package_is_replaced(table):
    UpdateColumns(table).add_udf_column("y", double).commit()
    table.dataset().drop_columns(["y"])  # pylance, not the package: the fingerprints stay
    start = table.dataset().version
    UpdateColumns(table).add_udf_column("y", double).commit()
    ds = table.dataset()
    assert ds.schema.names == ["x", "y", FP_Y]
    assert [type(t.operation).__name__ for t in ds.get_transactions(2)] == ["Merge", "Project"]  # dropped, added
    assert ds.version == start + 2


def test_swapping_a_udf_keeps_the_columns_identity_and_changes_only_its_code(table):
    UpdateColumns(table).add_udf_column("y", double).commit()
    before = udf_column_info(table.dataset().schema.field("y").metadata)
    swap = UpdateColumns(table).swap_udf("y", double_fixed)
    version = swap.commit()
    after = udf_column_info(table.dataset().schema.field("y").metadata)
    assert version == table.dataset().version
    assert (after.name, after.version, after.column_uid, after.input_columns) == \
        (before.name, before.version, before.column_uid, before.input_columns)
    fixed = load_udf(after.pickle)
    assert (fixed(3), fixed(4)) == (6, 8) and before.pickle != after.pickle  # the fix's code is what runs now

    assert swap.commit() == version  # done: committing the same change again changes nothing

    with pytest.raises(UDFDefinitionError, match=r"column 'y' of table 'events' holds int64; the fixed UDF 'halve' "
                                                 r"returns double"):
        UpdateColumns(table).swap_udf("y", halve)
    with pytest.raises(ColumnError, match=r"column 'x' of table 'events' is not a UDF column"):
        UpdateColumns(table).swap_udf("x", double)


def test_a_swap_meets_a_column_dropped_and_added_again_since_it_was_built(table):
    UpdateColumns(table).add_udf_column("y", double).commit()
    swap = UpdateColumns(table).swap_udf("y", double_fixed)
    UpdateColumns(table).drop_columns(["y"]).commit()  # another writer replaces the column meanwhile
    UpdateColumns(table).add_udf_column("y", double).commit()
    incarnation = udf_column_info(table.dataset().schema.field("y").metadata).column_uid
    version = table.dataset().version
    with pytest.raises(ColumnError, match=r"column 'y' of table 'events' was dropped or replaced"):
        swap.commit()
    assert table.dataset().version == version
    assert udf_column_info(table.dataset().schema.field("y").metadata).column_uid == incarnation


def test_a_change_built_before_another_writers_commit_lands_on_top_of_it(table):
    update = UpdateColumns(table).add_udf_column("y", double)
    other = table.dataset()
    other.add_columns(pa.field("w", pa.int64()))  # another writer's schema change, after the builder read
    update.commit()
    assert _names(table) == ["x", "w", "y", FP_Y]

    late = UpdateColumns(table).add_udf_column("z", halve)
    UpdateColumns(table).add_udf_column("z", double).commit()  # the same name, taken meanwhile
    with pytest.raises(ColumnError, match=r"column 'z' already exists in table 'events'"):
        late.commit()
    assert udf_column_info(table.dataset().schema.field("z").metadata).name == "double"


def test_an_addition_that_landed_is_not_made_again(table):
    update = UpdateColumns(table).add_udf_column("y", double)
    version = update.commit()
    update._done.clear()  # as if its commit's answer had been lost: the change is committed again
    assert update.commit() == version  # found in the table, by this incarnation's id: no second commit
    assert _names(table) == ["x", "y", FP_Y]


def test_table_metadata_is_set_and_removed(table):
    UpdateColumns(table).set_table_metadata({"a": "1", "b": "2"}).commit()
    UpdateColumns(table).set_table_metadata({"a": None}).commit()
    assert table.dataset().schema.metadata == {b"b": b"2"}


def test_the_facade_calls_the_builder(tmp_path):
    db = gp.connect(str(tmp_path / "db"))
    tbl = db.create_table("events", pa.table({"x": list(range(6))}))
    version = tbl.add_columns({"y": double})
    assert version == tbl.version and tbl.schema.names == ["x", "y", FP_Y]
    tbl.drop_columns(["y"])
    assert tbl.schema.names == ["x"]

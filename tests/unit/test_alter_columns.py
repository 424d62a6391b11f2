"""``Table.alter_columns``: a UDF column's code revised (its values stale until a backfill), columns renamed (a UDF
column with its fingerprints, its values valid), nullability changed; bad input refused before anything changes.

Backfills run on ``InProcessRunner`` (no JVM); the exact-rows proof on real Spark is tests/spark/test_alter_columns.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import ColumnError, InvalidArgumentError, UDFDefinitionError
from geneva_provider.core.fingerprints import fingerprint_column, holds_fingerprints_of
from geneva_provider.core.functions.udf import udf_column_info
from geneva_provider.pipeline.schema_changes import UpdateColumns
from geneva_provider.stages import InProcessRunner


@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return 2 * x


@gp.udf(data_type=pa.int64())
def triple(x: int) -> int:
    return 3 * x


@gp.udf(data_type=pa.float64())
def halve(x: int) -> float:
    return x / 2


@gp.udf(data_type=pa.int64())
def plus(x: int) -> int:
    return x + 1


@pytest.fixture
def tbl(tmp_path):
    db = gp.connect(str(tmp_path / "db"))
    t = db.create_table("events", pa.table({"x": list(range(6)), "w": list(range(6))}), max_rows_per_file=3)
    t.add_columns({"y": double, "z": (plus, ["y"])})
    t.backfill("y", spark=InProcessRunner(), progress=False)
    t.backfill("z", spark=InProcessRunner(), progress=False)
    return t


def _states(tbl):
    return {c.column: (c.rows_valid, c.rows_stale, c.rows_missing) for c in tbl.status().columns}


def test_a_revised_udf_leaves_the_old_values_stale_and_a_backfill_computes_them(tbl):
    before = udf_column_info(tbl.schema.field("y").metadata)
    version = tbl.alter_columns([{"path": "y", "udf": triple}])  # a list of dicts, as several dicts
    after = udf_column_info(tbl.schema.field("y").metadata)
    assert version == tbl.version
    assert (after.name, after.version, after.column_uid) == ("triple", triple.version, before.column_uid)
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [0, 2, 4, 6, 8, 10]  # readable until recomputed
    assert _states(tbl) == {"y": (0, 6, 0), "z": (6, 0, 0)}
    assert tbl.udf_columns()["y"]["rows_stale"] == 6

    assert tbl.backfill("y", spark=InProcessRunner(), progress=False).rows_computed == 6
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [3 * x for x in range(6)]
    assert _states(tbl) == {"y": (6, 0, 0), "z": (1, 5, 0)}  # z reads y: stale where y changed (not at x = 0)

    assert tbl.alter_columns({"path": "y", "udf": triple}) == tbl.version  # the same UDF again: nothing stale
    assert _states(tbl)["y"] == (6, 0, 0)


def test_a_new_udf_may_read_other_inputs_and_the_reference_aliases_are_taken(tbl):
    tbl.alter_columns({"path": "y", "virtual_column": triple, "input_columns": ["w"]})
    assert udf_column_info(tbl.schema.field("y").metadata).input_columns == ["w"]
    assert tbl.backfill("y", spark=InProcessRunner(), progress=False).rows_computed == 6
    assert tbl.to_arrow(["y"]).column("y").to_pylist() == [3 * w for w in range(6)]
    tbl.alter_columns({"path": "x", "name": "x1", "nullable": False})  # Lance's own key for a rename; x has no NULL
    field = tbl.schema.field("x1")
    assert not field.nullable and "x" not in tbl.schema.names  # no UDF reads x any more: it may be renamed


def test_renaming_a_udf_column_takes_its_fingerprints_and_keeps_its_values_valid(tbl):
    tbl.alter_columns({"path": "z", "rename": "z2"})
    schema = tbl.schema
    assert "z" not in schema.names and holds_fingerprints_of(schema.field(fingerprint_column("z2")), "z2")
    assert fingerprint_column("z") not in schema.names
    assert _states(tbl) == {"y": (6, 0, 0), "z2": (6, 0, 0)}
    assert tbl.backfill("z2", spark=InProcessRunner(), progress=False).rows_computed == 0
    assert tbl.to_arrow(["z2"]).column("z2").to_pylist() == [2 * x + 1 for x in range(6)]
    tbl.dataset().validate()


@pytest.mark.parametrize(("alteration", "error", "message"), [
    ({"path": "nope", "udf": triple}, ColumnError, r"column 'nope' not found in table 'events'"),
    ({"path": "x", "udf": triple}, ColumnError, r"column 'x' of table 'events' is not a UDF column"),
    ({"path": "y", "udf": halve}, UDFDefinitionError,
     r"column 'y' of table 'events' holds int64; the new UDF 'halve' returns double"),
    ({"path": "y", "udf": "triple"}, UDFDefinitionError, r"column 'y' of table 'events': udf must be a @udf"),
    ({"path": "y", "udf": triple, "input_columns": ["nope"]}, ColumnError,
     r"column 'y': UDF 'triple' reads \['nope'\], not found in table 'events'"),
    ({"path": "y", "udf": triple, "input_columns": ["y"]}, UDFDefinitionError, r"cannot read the column it computes"),
    ({"path": "x", "rename": "w"}, ColumnError, r"column 'x' of table 'events' to 'w': column 'w' exists"),
    ({"path": "y", "rename": "z"}, ColumnError, r"to 'z': column 'z' exists"),
    ({"path": "y", "rename": "__geneva_fp__q"}, InvalidArgumentError, r"column name '__geneva_fp__q' is reserved"),
    ({"path": "x", "rename": "x2"}, ColumnError, r"rename column 'x' of table 'events': UDF column\(s\) \['y'\]"),
    ({"path": fingerprint_column("y"), "rename": "f"}, ColumnError, r"is the package's own"),
    ({"path": "y", "nullable": False}, ColumnError, r"column 'y' of table 'events' is a UDF column: it must stay"),
    ({"path": "y", "data_type": pa.int32()}, ColumnError, r"column 'y' of table 'events' is computed by UDF 'double'"),
    ({"path": "y", "colour": "red"}, InvalidArgumentError, r"unknown key\(s\) \['colour'\]"),
    ({"path": "y"}, InvalidArgumentError, r"column 'y': nothing to alter"),
    ({"udf": triple}, InvalidArgumentError, r"'path' must name a column"),
    ({"path": "y", "rename": "a", "name": "b"}, InvalidArgumentError, r"give 'rename' or 'name', not both"),
    ({"path": "x", "input_columns": ["w"]}, InvalidArgumentError, r"input_columns goes with a new 'udf'"),
])
def test_bad_input_names_the_table_and_column_and_changes_nothing(tbl, alteration, error, message):
    version, schema = tbl.version, tbl.schema
    with pytest.raises(error, match=message) as failed:
        tbl.alter_columns({"path": "x", "nullable": True}, alteration)  # a good alteration first: not landed either
    assert "events" in str(failed.value)
    assert tbl.version == version and tbl.schema == schema


def test_no_alterations_is_refused(tbl):
    with pytest.raises(InvalidArgumentError, match=r"alter_columns on table 'events': no alterations given"):
        tbl.alter_columns()


def test_an_alteration_that_landed_is_not_made_again_and_one_built_before_another_commit_lands_on_it(tbl):
    update = UpdateColumns(tbl.ref).revise_udf("y", triple).alter_column("w", rename="w2")
    tbl.dataset().add_columns(pa.field("extra", pa.int64()))  # another writer's schema change, after the builder read
    version = update.commit()
    assert tbl.version == version and {"w2", "extra"} <= set(tbl.schema.names) and "w" not in tbl.schema.names
    update._done.clear()  # as if its commits' answers had been lost
    assert update.commit() == version  # found in the table: no second commit
    assert udf_column_info(tbl.schema.field("y").metadata).name == "triple"

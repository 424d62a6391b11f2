"""Multi-output UDFs (``-> Columns[T]``) without a JVM: decoration, declaring and dropping a group, its checks."""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.stages import InProcessRunner
from tests.helpers import events_table


class Pair(NamedTuple):
    left: int
    right: str


@gp.udf
def pair(x: int) -> gp.Columns[Pair]:
    return Pair(x + 1, f"r{x}")


def test_columns_annotation_makes_a_struct_of_the_named_tuple():
    assert pair.is_multi_output
    assert pair.data_type == pa.struct([pa.field("left", pa.int64()), pa.field("right", pa.string())])
    assert pair.outputs().names == ["left", "right"]
    assert pair(1) == Pair(2, "r1")


class NotATuple:
    a: int


def test_bad_declarations_are_refused_at_decoration():
    with pytest.raises(gp.UDFDefinitionError, match=r"Columns\[...\] takes a NamedTuple"):
        @gp.udf
        def f(x: int) -> gp.Columns[NotATuple]:
            return NotATuple()
    with pytest.raises(gp.UDFDefinitionError, match=r"must be a struct of its fields \['left', 'right'\]"):
        @gp.udf(data_type=pa.int64())
        def g(x: int) -> gp.Columns[Pair]:
            return Pair(x, "")
    with pytest.raises(gp.UDFDefinitionError, match=r"valid identifier prefix"):
        gp.UnpackedUDF(pair, prefix="img-")
    with pytest.raises(gp.UDFDefinitionError, match=r"only a UDF returning a struct"):
        gp.UnpackedUDF(gp.udf(lambda x: x, data_type=pa.int64(), input_columns=["x"]))


def test_a_group_is_declared_backfilled_and_redeclared(db):
    tbl = db.create_table("events", events_table(30))
    tbl.add_columns(gp.UnpackedUDF(pair, prefix="p_"))
    assert tbl.schema.names == ["id", "x", "p_left", "p_right", "__geneva_fp__p_left"]
    version = tbl.add_columns(gp.UnpackedUDF(pair, prefix="p_"))  # the same group again: left as it is
    assert version == tbl.version and tbl.schema.names[-1] == "__geneva_fp__p_left"
    assert tbl.backfill("p_right", spark=InProcessRunner(), progress=False).rows_computed == 30
    t = tbl.to_arrow(["x", "p_left", "p_right"])
    assert t.column("p_left").to_pylist() == [x + 1 for x in range(30)]
    assert t.column("p_right").to_pylist() == [f"r{x}" for x in range(30)]
    assert list(tbl.udf_columns()) == ["p_left"]  # the group is listed under its lead


def test_refused_declarations_change_nothing(db):
    tbl = db.create_table("events", events_table(5))
    version = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"computes one column"):
        tbl.add_columns(gp.udf(lambda x: x, data_type=pa.int64(), input_columns=["x"], name="one"))
    with pytest.raises(gp.InvalidArgumentError, match=r"add it as add_columns\(pair\)"):
        tbl.add_columns({"p": pair})
    tbl.add_columns({"right": gp.udf(lambda x: str(x), data_type=pa.string(), input_columns=["x"], name="s")})
    version = tbl.version
    with pytest.raises(gp.ColumnError, match=r"already has \['right'\]"):
        tbl.add_columns(pair)
    assert tbl.version == version
    with pytest.raises(gp.InvalidArgumentError, match=r"view.add_columns\(pair\)"):
        tbl.search(None).select({"p": pair})


def test_part_of_a_group_is_not_dropped(db):
    tbl = db.create_table("events", events_table(5))
    tbl.add_columns(pair)
    version = tbl.version
    with pytest.raises(gp.ColumnError, match=r"drop all of them in one call \(the rest: \['left'\]\)"):
        tbl.drop_columns(["right"])
    assert tbl.version == version
    tbl.drop_columns(["right", "left"])
    assert tbl.schema.names == ["id", "x"]


def test_a_skipped_row_is_null_in_every_column_of_its_group(db):
    @gp.udf(on_error=gp.skip_on_error())
    def picky(x: int) -> gp.Columns[Pair]:
        if x == 3:
            raise ValueError("x is 3")
        return Pair(x, str(x))

    tbl = db.create_table("events", events_table(6))
    tbl.add_columns(picky)
    tbl.backfill("left", spark=InProcessRunner(), progress=False)
    t = tbl.to_arrow(["left", "right"])
    assert t.column("left").to_pylist() == [0, 1, 2, None, 4, 5]
    assert t.column("right").to_pylist() == ["0", "1", "2", None, "4", "5"]

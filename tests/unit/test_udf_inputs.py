"""The reference's input forms without a JVM: struct fields by dot path, list values as numpy arrays or lists,
and stateful classes registered as instances built with constructor arguments (their binding and refusals)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.functions.udf import load_udf

INFO = pa.struct([("vals", pa.list_(pa.int32())), ("tag", pa.string())])


def _info_table() -> pa.Table:
    return pa.table({"id": pa.array([0, 1, 2, 3], pa.int64()),
                     "info": pa.array([{"vals": [1, 2, 3], "tag": "a"}, {"vals": [4], "tag": "b"},
                                       {"vals": None, "tag": "c"}, None], INFO),
                     "vec": pa.array([[1.0, 2.0], [3.0], [], None], pa.list_(pa.float32()))})


@gp.udf(data_type=pa.int64(), input_columns=["info.vals"])
def sum_vals(vals: np.ndarray | None) -> int | None:
    assert vals is None or isinstance(vals, np.ndarray)
    return None if vals is None else int(vals.sum())


def test_a_struct_field_by_dot_path_reads_the_field_and_null_where_its_struct_is_null():
    batch = pa.Table.from_arrays([_info_table().column("info")], ["info"])
    assert sum_vals.evaluate(batch, ["info.vals"]).to_pylist() == [6, 4, None, None]


def test_list_values_come_as_numpy_arrays_or_lists_as_annotated():
    @gp.udf(data_type=pa.list_(pa.float32()))
    def doubled(vec: np.ndarray | None) -> np.ndarray | None:
        assert vec is None or (isinstance(vec, np.ndarray) and vec.dtype == np.float32)
        return None if vec is None else vec * 2

    @gp.udf
    def count(vec: list[float] | None) -> int | None:
        assert vec is None or isinstance(vec, list)
        return None if vec is None else len(vec)

    assert doubled.array_params == (0,) and count.array_params == ()
    batch = _info_table()
    assert doubled.evaluate(batch, ["vec"]).to_pylist() == [[2.0, 4.0], [6.0], [], None]
    assert count.evaluate(batch, ["vec"]).to_pylist() == [2, 1, 0, None]


def test_a_fixed_size_list_and_a_list_of_strings_come_as_numpy_arrays():
    @gp.udf(data_type=pa.list_(pa.float32(), 2))
    def plus_one(x: np.ndarray) -> np.ndarray:
        return x + 1

    @gp.udf(data_type=pa.list_(pa.string()))
    def shout(x: np.ndarray) -> list[str]:
        return [v.upper() for v in x]

    fsl = pa.table({"x": pa.array([[0.0, 1.0], [2.0, 3.0]], pa.list_(pa.float32(), 2))})
    assert plus_one.evaluate(fsl, ["x"]).to_pylist() == [[1.0, 2.0], [3.0, 4.0]]
    words = pa.table({"x": pa.array([["a", "b"], ["c"]], pa.list_(pa.string()))})
    assert shout.evaluate(words, ["x"]).to_pylist() == [["A", "B"], ["C"]]


def test_paths_and_list_annotations_that_cannot_be_read_are_refused_before_anything_changes(db):
    tbl = db.create_table("things", _info_table())
    version = tbl.version

    @gp.udf
    def length(id: list[int]) -> int:
        return len(id)

    @gp.udf(data_type=pa.int64())
    def total(id: np.ndarray) -> int:
        return int(id.sum())

    for path in ("info.nope", "nope.vals", "id.x"):
        with pytest.raises(gp.ColumnError, match=rf"reads \['{path}'\], not found in table 'things'"):
            tbl.add_columns({"s": gp.udf(lambda v: 1, data_type=pa.int64(), input_columns=[path], name="one")})
    with pytest.raises(gp.UDFDefinitionError, match=r"parameter 'id' is annotated a Python list.*input 'id' is int64"):
        tbl.add_columns({"n": length})
    with pytest.raises(gp.UDFDefinitionError, match=r"'total'.*parameter 'id' is annotated numpy.ndarray.*int64"):
        tbl.add_columns({"n": total})
    with pytest.raises(gp.UDFDefinitionError, match=r"annotated numpy.ndarray.*input 'info.tag' is string"):
        tbl.add_columns({"n": gp.udf(data_type=pa.int64(), input_columns=["info.tag"])(sum_vals.func)})
    assert tbl.version == version and tbl.schema.names == ["id", "info", "vec"]
    with pytest.raises(gp.UDFDefinitionError, match=r"view column 'n': UDF 'length': parameter 'id'.*int64"):
        tbl.search(None).select({"n": length})


def test_a_column_read_by_path_is_neither_dropped_nor_renamed_from_under_its_reader(db):
    tbl = db.create_table("things", _info_table())
    tbl.add_columns({"s": sum_vals})
    assert tbl.udf_columns()["s"]["input_columns"] == ["info.vals"]
    version = tbl.version
    with pytest.raises(gp.ColumnError, match=r"cannot drop \['info'\] from table 'things': UDF column 's' reads"):
        tbl.drop_columns(["info"])
    with pytest.raises(gp.ColumnError, match=r"cannot rename column 'info'.*\['s'\] read it"):
        tbl.alter_columns({"path": "info", "rename": "meta"})
    assert tbl.version == version


@gp.udf(data_type=pa.list_(pa.float32(), 2))
class Embed(Callable):
    """The reference's form: a Callable class with a constructor argument, heavy state in setup()."""

    def __init__(self, model: str = "small") -> None:
        self.model = model
        self.loaded: str | None = None
        self.setups = 0

    def setup(self) -> None:
        self.setups += 1
        self.loaded = self.model.upper()

    def __call__(self, text: str) -> list[float]:
        assert self.loaded is not None, "setup() runs before the first call"
        return [float(len(text)), float(len(self.loaded))]


def test_calling_a_stateful_udf_builds_the_udf_of_an_instance_with_its_arguments():
    m2 = Embed(model="model-two")
    assert isinstance(m2, gp.UDF) and m2.stateful and m2.input_columns == ["text"]
    assert m2.init_kwargs == (("model", "model-two"),) and Embed.init_args is None
    # Its arguments are part of what it computes: another argument is another version, none is the class's.
    assert m2.version != Embed(model="other").version and Embed().version == Embed.version
    assert m2.version == Embed(model="model-two").version
    batch = pa.table({"text": ["a", "bbb"]})
    assert m2.evaluate(batch, ["text"]).to_pylist() == [[1.0, 9.0], [3.0, 9.0]]
    assert m2.evaluate(batch, ["text"]).to_pylist() == [[1.0, 9.0], [3.0, 9.0]]
    assert m2._instances[()].setups == 1  # setup() ran once for every call of this process
    assert m2("hello") == [5.0, 9.0]  # a built one is called on a row's values
    # It travels with its arguments, and is built afresh where it is loaded.
    loaded = load_udf(m2.pickled_b64())
    assert loaded.init_kwargs == (("model", "model-two"),) and loaded._instances == {}
    assert loaded.evaluate(batch, ["text"]).to_pylist() == [[1.0, 9.0], [3.0, 9.0]]
    # An explicit version= stays the version, whatever the arguments.
    fixed = gp.udf(data_type=pa.list_(pa.float32(), 2), version="v1")(Embed.func)
    assert fixed(model="a").version == fixed(model="b").version == "v1"


class _NeedsModel:
    def __init__(self, model: str) -> None:
        self.model = model

    def __call__(self, x: int) -> int:
        return x + len(self.model)


def test_constructor_arguments_that_cannot_build_the_class_are_refused_naming_it(db):
    needs = gp.udf(data_type=pa.int64())(_NeedsModel)  # declared: its argument is given when it is registered
    refused = r"UDF '_NeedsModel'.*_NeedsModel\(size=3\), but that fails.*'model'"
    with pytest.raises(gp.UDFDefinitionError, match=refused):
        needs(size=3)
    with pytest.raises(gp.UDFDefinitionError, match=r"'Embed'.*Embed\('a', 'b'\), but that fails"):
        Embed("a", "b")
    tbl = db.create_table("events", pa.table({"x": pa.array([1, 2], pa.int64())}))
    version = tbl.version
    with pytest.raises(gp.UDFDefinitionError, match=r"_NeedsModel\(\), but that fails.*'model'.*_NeedsModel\(\.\.\.\)"):
        tbl.add_columns({"y": needs})
    assert tbl.version == version and tbl.schema.names == ["x"]
    tbl.add_columns({"y": needs(model="abc")})
    assert tbl.udf_columns()["y"]["input_columns"] == ["x"]


def test_a_chunker_class_must_still_be_buildable_with_no_arguments():
    class Split:
        def __init__(self, size: int) -> None:
            self.size = size

        def __call__(self, text: str) -> list[str]:
            return [text]

    with pytest.raises(gp.UDFDefinitionError, match=r"Split\(\), but that fails.*'size'"):
        gp.chunker(Split)


def test_rows_read_by_scan_and_by_take_give_a_struct_field_the_same_column(tmp_path):
    import lance

    from geneva_provider.pipeline.columns.inputs import read_pieces

    ds = lance.write_dataset(_info_table(), str(tmp_path / "t.lance"), max_rows_per_file=3)
    pieces = [(0, np.array([0, 2]), False), (1, np.array([0]), True)]  # rows by take, a whole fragment by scan
    rows = read_pieces(ds, pieces, ["id", "info.vals"])
    assert rows.column_names == ["id", "info.vals"]
    assert rows.to_pydict() == {"id": [0, 2, 3], "info.vals": [[1, 2, 3], None, None]}


def test_a_view_computes_a_udf_of_a_struct_field_again_only_when_that_field_changes(db, tmp_path):
    from geneva_provider.stages import InProcessRunner

    calls = tmp_path / "calls.log"

    @gp.udf(data_type=pa.int64(), input_columns=["id", "info.vals"])
    def logged_sum(id: int, vals: np.ndarray | None) -> int | None:
        with open(calls, "a") as f:
            f.write(f"{id}\n")
        return None if vals is None else int(vals.sum())

    tbl = db.create_table("things", _info_table())
    view = db.create_materialized_view("v", tbl.search(None).select({"id": "id", "info": "info", "s": logged_sum}))
    view.refresh(spark=InProcessRunner(), progress=False)
    assert view.to_arrow(["id", "s"]).to_pydict() == {"id": [0, 1, 2, 3], "s": [6, 4, None, None]}
    calls.unlink()
    tbl.dataset().update({"info": "named_struct('vals', info.vals, 'tag', 'z')"}, where="id = 0")
    view.refresh(spark=InProcessRunner(), progress=False)
    assert not calls.exists() and view.to_arrow(["info"]).column("info")[0].as_py() == {"vals": [1, 2, 3], "tag": "z"}
    tbl.dataset().update({"info": "named_struct('vals', [9], 'tag', info.tag)"}, where="id = 1")
    view.refresh(spark=InProcessRunner(), progress=False)
    assert calls.read_text().split() == ["1"]
    assert view.to_arrow(["id", "s"]).to_pydict() == {"id": [0, 1, 2, 3], "s": [6, 9, None, None]}

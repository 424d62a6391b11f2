"""The one user-function core under ``@udf``, ``@chunker`` and ``@udtf``: one annotation -> Arrow mapper,
one signature binder, one base (outputs, pickling, loading), and functions pickled before it still load.

All but the last test run without Spark; the last backfills inferred-type UDF columns on real local Spark.
Annotations here are evaluated as written (no ``from __future__ import annotations``), so functions and row
types defined inside a test are annotated with the real classes, as in a notebook.

The part without a JVM; what needs a Spark session is in tests/spark/test_function_core.py.
"""

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional, TypedDict

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider import examples
from geneva_provider.core.error_policy import RowFailure
from geneva_provider.core.functions.udf import UDFKind, load_udf, udf_column_info
from geneva_provider.core.functions.udtf import UDTF, UDTFKind, load_udtf

OLD = json.loads((Path(__file__).parents[1] / "fixtures" / "functions_main" / "functions.json").read_text())


@dataclass
class Point:
    x: float
    y: float


class Span(NamedTuple):
    start: int
    end: int


class Tag(TypedDict):
    name: str
    score: float


def _inferred(annotation) -> pa.DataType:
    def f(x: int):
        return x

    f.__annotations__["return"] = annotation
    return gp.udf(f).data_type


# ---------------------------------------------------------------------- must show: inferred UDF types
def test_a_udf_returning_list_of_float_infers_a_list_of_doubles_and_computes_it():
    @gp.udf
    def f(x: int) -> list[float]:
        return [x / 2, float(x)]

    @gp.udf(data_type=pa.list_(pa.float64()))
    def declared(x: int) -> list[float]:
        return [x / 2, float(x)]

    assert f.data_type == pa.list_(pa.float64())
    assert f.field("v", ["x"]).type == pa.list_(pa.float64())
    assert f.evaluate(pa.record_batch({"x": [1, 4]}), ["x"]).to_pylist() == [[0.5, 1.0], [2.0, 4.0]]
    # inferring the type it used to need data_type= for gives the version the declared one had
    assert f.version != "" and len(f.version) == 16
    assert gp.udf(f.func, data_type=pa.list_(pa.float64())).version == f.version
    assert declared.data_type == f.data_type


@pytest.mark.parametrize("annotation", [Optional[str], str | None])  # noqa: UP045 - both spellings are meant
def test_a_udf_returning_optional_str_infers_a_nullable_string_and_returns_its_nones(annotation):
    def label(x: int):
        return None if x < 0 else f"#{x}"

    label.__annotations__["return"] = annotation
    made = gp.udf(label)
    assert made.data_type == pa.string()
    field = made.field("tag", ["x"])
    assert field.type == pa.string() and field.nullable
    assert made.outputs() == pa.schema([pa.field("label", pa.string(), nullable=True)])
    assert made.evaluate(pa.record_batch({"x": [3, -1]}), ["x"]).to_pylist() == ["#3", None]


# ---------------------------------------------------------------------- one mapper for every decorator
MAPPED = [
    (int, pa.int64()), (float, pa.float64()), (str, pa.string()), (bytes, pa.binary()), (bool, pa.bool_()),
    (list[float], pa.list_(pa.float64())), (list[list[int]], pa.list_(pa.list_(pa.int64()))),
    (Sequence[str], pa.list_(pa.string())), (Optional[int], pa.int64()), (list[int | None], pa.list_(pa.int64())),  # noqa: UP045
    (np.float32, pa.float32()), (np.int16, pa.int16()), (pa.float16(), pa.float16()),
    (Point, pa.struct([("x", pa.float64()), ("y", pa.float64())])),
    (Span, pa.struct([("start", pa.int64()), ("end", pa.int64())])),
    (Tag, pa.struct([("name", pa.string()), ("score", pa.float64())])),
    (list[Point], pa.list_(pa.struct([("x", pa.float64()), ("y", pa.float64())]))),
]


@pytest.mark.parametrize(("annotation", "expected"), MAPPED, ids=[str(i) for i, _ in enumerate(MAPPED)])
def test_an_annotation_maps_to_one_arrow_type_whichever_decorator_reads_it(annotation, expected):
    row = type("Row", (), {"__annotations__": {"v": annotation}})
    row = dataclass(row)

    def rows(text: str) -> Iterator[row]:
        yield row(text)

    def per(batches):
        yield from batches

    assert _inferred(annotation) == expected                                                  # @udf's return
    assert gp.chunker(rows).output_schema.field("v").type == expected                         # a chunker's row
    assert gp.chunker(output_schema={"v": annotation})(rows).output_schema.field("v").type == expected
    assert gp.udtf(output_schema={"v": annotation})(per).output_schema.field("v").type == expected


def test_what_does_not_map_is_refused_naming_the_function_and_the_remedy():
    with pytest.raises(gp.UDFDefinitionError, match=r"UDF 'f': .*dict\[str, int\].*pass data_type="):
        _inferred(dict[str, int])
    with pytest.raises(gp.UDFDefinitionError, match=r"UDF 'f': .*pass data_type="):
        _inferred(int | str)

    class Bad(NamedTuple):
        when: dict

    def rows(text: str) -> Iterator[Bad]:
        yield Bad({})

    with pytest.raises(gp.UDFDefinitionError, match=r"chunker 'rows', field 'when': .*pass output_schema="):
        gp.chunker(rows)


def test_a_udf_returning_a_row_type_computes_a_struct_column():
    @gp.udf
    def mid(x: int) -> Point:
        return Point(x / 2, float(x))

    @gp.udf
    def span(x: int) -> Span | None:
        return None if x == 0 else Span(x, x + 1)

    batch = pa.record_batch({"x": [0, 4]})
    assert mid.evaluate(batch, ["x"]).to_pylist() == [{"x": 0.0, "y": 0.0}, {"x": 2.0, "y": 4.0}]
    assert span.evaluate(batch, ["x"]).to_pylist() == [None, {"start": 4, "end": 5}]


def test_a_chunker_row_with_a_nested_row_type_converts_and_names_a_bad_nested_value():
    @dataclass
    class Piece:
        text: str
        at: Span

    @gp.chunker
    def pieces(text: str) -> Iterator[Piece]:
        for i, word in enumerate(text.split()):
            yield Piece(word, Span(i, i + 1) if word != "bad" else Span("x", 0))

    assert pieces.output_schema.field("at").type == pa.struct([("start", pa.int64()), ("end", pa.int64())])
    out, parents = pieces.expand(pa.table({"text": ["a b", "c"]}), [])
    assert out.to_pylist() == [{"text": "a", "at": {"start": 0, "end": 1}}, {"text": "b", "at": {"start": 1, "end": 2}},
                               {"text": "c", "at": {"start": 0, "end": 1}}]
    assert parents.tolist() == [0, 0, 1]
    with pytest.raises(Exception, match=r"field 'at.start' holds a str \('x'\)"):
        pieces.expand(pa.table({"text": ["bad"]}), [])


# ---------------------------------------------------------------------- one signature binder
def _required_keyword(text: str, *, scale: int) -> Iterator[Span]:
    yield Span(0, scale)


class _NoCall:
    def run(self, text: str) -> int:
        return 0


@pytest.mark.parametrize(("fn", "needles"), [
    (_required_keyword, ["keyword-only", "['scale']"]),
    (_NoCall, ["the class _NoCall has no __call__ method"]),
])
def test_udf_and_chunker_bind_a_signature_the_same_way(fn, needles):
    for decorate, label in ((gp.udf(data_type=pa.int64()), "UDF"), (gp.chunker, "chunker")):
        with pytest.raises(gp.UDFDefinitionError) as refused:
            decorate(fn)
        assert str(refused.value).startswith(f"{label} '{fn.__name__}'"), refused.value
        for needle in needles:
            assert needle in str(refused.value)


def test_parameters_bind_to_columns_by_name_or_input_columns_for_udf_and_chunker():
    def split(text: str, size: int) -> Iterator[Span]:
        for i in range(0, len(text), size):
            yield Span(i, min(i + size, len(text)))

    def total(text: str, size: int) -> int:
        return len(text) + size

    assert gp.chunker(split).input_columns == gp.udf(total).input_columns == ["text", "size"]
    assert gp.chunker(input_columns=["body", "n"])(split).input_columns == ["body", "n"]
    assert gp.udf(input_columns=["body", "n"])(total).input_columns == ["body", "n"]
    with pytest.raises(gp.UDFDefinitionError, match=r"chunker 'split' takes 2 parameters but input_columns names 1"):
        gp.chunker(input_columns=["body"])(split)
    with pytest.raises(gp.UDFDefinitionError, match=r"UDF 'total' takes 2 parameters but input_columns names 1"):
        gp.udf(input_columns=["body"])(total)


# ---------------------------------------------------------------------- one base
def test_outputs_are_one_field_for_a_udf_and_the_row_fields_for_a_udtf():
    @gp.udf
    def f(x: int) -> list[float]:
        return [float(x)]

    @gp.chunker
    def spans(text: str) -> Iterator[Span]:
        yield Span(0, len(text))

    assert f.outputs() == pa.schema([pa.field("f", pa.list_(pa.float64()))])
    assert spans.outputs() == pa.schema([pa.field("start", pa.int64()), pa.field("end", pa.int64())])


def test_each_kind_pickles_and_loads_and_loading_checks_the_kind():
    @gp.udf(on_error=gp.skip_on_error(), num_cpus=1)
    def f(x: int) -> Optional[str]:  # noqa: UP045
        return str(x)

    @gp.chunker
    def spans(text: str) -> Iterator[Span]:
        yield Span(0, len(text))

    udf_pickle = udf_column_info(f.field("s", ["x"]).metadata).pickle
    loaded = load_udf(udf_pickle)
    assert (loaded.version, loaded.resources, loaded.on_error) == (f.version, f.resources, f.on_error)
    assert load_udtf(spans.pickled_b64()).version == spans.version
    with pytest.raises(gp.UDFDefinitionError, match="field metadata holds a UDTF, not a geneva UDF"):
        load_udf(spans.pickled_b64())
    with pytest.raises(gp.UDFDefinitionError, match="view metadata holds a UDF, not a geneva UDTF"):
        load_udtf(udf_pickle)

    lock = __import__("threading").Lock()

    @gp.chunker
    def locked(text: str) -> Iterator[Span]:
        with lock:
            yield Span(0, 1)

    with pytest.raises(gp.UDFDefinitionError, match=r"chunker 'locked' cannot be pickled .*lock"):
        locked.pickled_b64()


def test_a_failing_stateful_init_is_a_call_error_naming_the_function_for_udf_and_chunker():
    class Broken:
        def __init__(self):
            raise RuntimeError("no model")

        def __call__(self, text: str) -> Iterator[Span]:
            yield Span(0, 1)

    made_udf = gp.udf(data_type=pa.int64())(Broken)
    made_chunker = gp.chunker(Broken)
    with pytest.raises(Exception, match=r"RuntimeError while creating the stateful UDF 'Broken': no model"):
        made_udf.evaluate(pa.record_batch({"text": ["a"]}), ["text"])
    with pytest.raises(Exception, match=r"RuntimeError while creating the stateful chunker 'Broken': no model"):
        made_chunker.expand(pa.table({"text": ["a"]}), [])


# ---------------------------------------------------------------------- pickles from before the core
def test_a_udf_pickled_by_the_code_before_the_core_loads_and_computes():
    """Field metadata written by main before core/functions/ existed: its pickle names core.udf.UDF."""
    info = udf_column_info(OLD["udf_field_metadata"])
    assert (info.name, info.kind, info.input_columns, info.max_failed_rows) == ("root", "scalar", ["x"], 5)
    assert info.resources == gp.udf(math.sqrt, data_type=pa.float64(), num_cpus=1).resources
    old = load_udf(info.pickle)
    assert type(old) is gp.UDF and old.kind is UDFKind.SCALAR and old.on_error.can_skip
    assert old.evaluate(pa.record_batch({"x": [4.0, 9.0]}), ["x"]).to_pylist() == [2.0, 3.0]
    failures: list[RowFailure] = []
    assert old.evaluate(pa.record_batch({"x": [-1.0]}), ["x"], failures).to_pylist() == [None]  # skipped
    assert [f.error_type for f in failures] == ["ValueError"]
    # the same function decorated today has the same version: its column is not recomputed
    again = gp.udf(math.sqrt, data_type=pa.float64(), input_columns=["x"], name="root")
    assert again.version == info.version == old.version


def test_a_chunker_pickled_by_the_code_before_the_core_loads_and_expands():
    old = load_udtf(OLD["chunker_pickle"])
    assert type(old) is UDTF and old.kind is UDTFKind.CHUNKER and str(old.output_schema) == OLD["chunker_schema"]
    assert old.version == OLD["chunker_version"] == gp.chunker(examples.split_text).version
    text = "one two three four five six seven eight nine ten " * 20
    out, parents = old.expand(pa.table({"text": [text, ""]}), [])
    assert out.to_pylist() == [{"chunk": c.chunk, "start": c.start} for c in examples.split_text(text)]
    assert set(parents.tolist()) == {0}


# ---------------------------------------------------------------------- on Spark

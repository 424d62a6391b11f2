"""The @udf decorator: kinds, type inference, versions, metadata round trips, output checks."""

from __future__ import annotations

import decimal
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as gp
from geneva_provider.core.functions.udf import UDFCallError, UDFKind, load_udf, udf_column_info


def test_scalar_udf_infers_type_and_inputs_from_signature():
    @gp.udf
    def add(a: int, b: int) -> int:
        return a + b

    assert add.kind is UDFKind.SCALAR
    assert add.data_type == pa.int64()
    assert add.input_columns == ["a", "b"]
    assert add(2, 3) == 5
    batch = pa.record_batch({"a": [1, 2], "b": [10, 20]})
    assert add.evaluate(batch, ["a", "b"]).to_pylist() == [11, 22]


@pytest.mark.parametrize(("annotation", "expected"), [(float, pa.float64()), (str, pa.string()),
                                                      (bool, pa.bool_()), (bytes, pa.binary())])
def test_return_annotation_maps_to_arrow_type(annotation, expected):
    def f(x: int):
        return x

    f.__annotations__["return"] = annotation
    assert gp.udf(f).data_type == expected


def test_array_udf_and_batch_udf_kinds():
    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def twice(x: pa.Array) -> pa.Array:
        return pc.multiply(x, 2)

    @gp.udf(data_type=pa.int64(), input_columns=["x", "y"])
    def total(batch: pa.RecordBatch) -> pa.Array:
        return pc.add(batch["x"], batch["y"])

    batch = pa.record_batch({"x": [1, 2, 3], "y": [10, 20, 30]})
    assert twice.kind is UDFKind.ARRAY
    assert twice.evaluate(batch, ["x"]).to_pylist() == [2, 4, 6]
    assert total.kind is UDFKind.BATCH
    assert total.evaluate(batch, ["x", "y"]).to_pylist() == [11, 22, 33]


def test_stateful_class_is_instantiated_once():
    inits = []

    @gp.udf(data_type=pa.int64())
    class Offset:
        def __init__(self):
            inits.append(1)
            self.k = 100

        def __call__(self, x: int) -> int:
            return x + self.k

    assert Offset.stateful and Offset.input_columns == ["x"]
    batch = pa.record_batch({"x": [1, 2]})
    assert Offset.evaluate(batch, ["x"]).to_pylist() == [101, 102]
    assert Offset.evaluate(batch, ["x"]).to_pylist() == [101, 102]
    assert len(inits) == 1


def test_ambiguous_return_type_needs_data_type():
    with pytest.raises(gp.UDFDefinitionError, match="pass data_type"):
        @gp.udf
        def f(x: pa.Array) -> pa.Array:
            return x


def test_input_columns_must_match_parameters():
    with pytest.raises(gp.UDFDefinitionError, match="takes 1 parameters"):
        @gp.udf(data_type=pa.int64(), input_columns=["a", "b"])
        def f(x: int) -> int:
            return x


def test_version_is_stable_and_changes_with_code():
    def make(body_factor):
        if body_factor == 2:
            def f(x: int) -> int:
                return x * 2
        else:
            def f(x: int) -> int:
                return x * 3
        return gp.udf(f)

    assert make(2).version == make(2).version
    assert make(2).version != make(3).version
    assert len(make(2).version) == 16


def test_field_metadata_round_trip_runs_the_function():
    @gp.udf(data_type=pa.int64())
    def plus_one(x: int) -> int:
        return x + 1

    field = plus_one.field("y", ["a"])
    info = udf_column_info(field.metadata)
    assert info.name == "plus_one" and info.input_columns == ["a"] and info.kind == "scalar"
    loaded = load_udf(info.pickle)
    assert loaded.version == plus_one.version
    assert loaded.evaluate(pa.record_batch({"a": [1, 5]}), ["a"]).to_pylist() == [2, 6]


def test_output_errors_name_the_problem():
    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def wrong_type(x: pa.Array) -> pa.Array:
        return pc.cast(x, pa.string())

    @gp.udf(data_type=pa.int64(), input_columns=["x"])
    def wrong_length(x: pa.Array) -> pa.Array:
        return x.slice(1)

    @gp.udf(data_type=pa.int64())
    def not_an_int(x: int) -> int:
        return "seven"

    @gp.udf(data_type=pa.int64())
    def raises(x: int) -> int:
        return 1 // (x - 2)

    batch = pa.record_batch({"x": pa.array([1, 2, 3], pa.int64())})
    with pytest.raises(UDFCallError, match="type string, expected the declared type int64"):
        wrong_type.evaluate(batch, ["x"])
    with pytest.raises(UDFCallError, match="returned 2 values for 3 input rows"):
        wrong_length.evaluate(batch, ["x"])
    with pytest.raises(UDFCallError, match="do not convert to the declared type int64"):
        not_an_int.evaluate(batch, ["x"])
    with pytest.raises(UDFCallError) as exc:
        raises.evaluate(batch, ["x"])
    assert exc.value.index == 1 and isinstance(exc.value.original, ZeroDivisionError)


def test_concurrency_keeps_order_and_runs_calls_in_flight_together():
    import threading
    import time

    in_flight, peak, lock = [0], [0], threading.Lock()

    def track(x):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.02)  # a remote call
        with lock:
            in_flight[0] -= 1
        return x * 2

    @gp.udf(data_type=pa.int64(), concurrency=8)
    def remote(x: int) -> int:
        return track(x)

    assert remote.version == gp.udf(data_type=pa.int64())(remote.func).version  # what it computes is the same

    @gp.udf(data_type=pa.int64(), input_columns=["x"], concurrency=4)
    def remote_batch(x: pa.Array) -> pa.Array:
        return pa.array([track(v) for v in x.to_pylist()], pa.int64())

    batch = pa.record_batch({"x": pa.array(range(64), pa.int64())})
    assert remote.evaluate(batch, ["x"]).to_pylist() == [2 * x for x in range(64)]
    assert peak[0] == 8
    peak[0] = 0
    assert remote_batch.evaluate(batch, ["x"]).to_pylist() == [2 * x for x in range(64)]
    assert peak[0] == 4

    @gp.udf(data_type=pa.int64(), concurrency=8)
    def fails(x: int) -> int:
        if x in (11, 40):
            raise ValueError(f"bad {x}")
        return x

    with pytest.raises(UDFCallError) as exc:
        fails.evaluate(batch, ["x"])
    assert exc.value.index == 11 and "bad 11" in str(exc.value)
    with pytest.raises(gp.UDFDefinitionError, match="concurrency must be a positive integer, got 0"):
        gp.udf(data_type=pa.int64(), concurrency=0)(lambda x: x)


@pytest.mark.parametrize(("values", "data_type"), [
    ([0.5, 1.0], pa.int64()),                       # a fraction
    ([[1.0, 2.5]], pa.list_(pa.int32())),             # nested
    ([{"a": 1.5}], pa.struct([("a", pa.int64())])),  # in a struct
])
def test_lossy_python_results_are_rejected_for_every_kind(values, data_type):
    @gp.udf(data_type=data_type)
    def scalar(x: int):
        return values[x]

    @gp.udf(data_type=data_type, input_columns=["x"])
    def batch(b: pa.RecordBatch):
        return values  # a Python list from a batch UDF is converted the same way

    rows = pa.record_batch({"x": pa.array(range(len(values)), pa.int64())})
    for fn in (scalar, batch):
        with pytest.raises(UDFCallError, match=rf"declared type {re.escape(str(data_type))}.*truncated"):
            fn.evaluate(rows, ["x"])


@pytest.mark.parametrize(("values", "data_type", "expected"), [
    ([1, None, 3], pa.int64(), [1, None, 3]), ([1.0, 2.0], pa.int64(), [1, 2]), ([1, 2.5], pa.float64(), [1.0, 2.5]),
    ([None, None], pa.string(), [None, None]), ([1], pa.decimal128(5, 2), [decimal.Decimal("1.00")]),
    ([{"a": 1}], pa.struct([("a", pa.int64()), ("b", pa.string())]), [{"a": 1, "b": None}]),
])
def test_exact_python_results_still_convert(values, data_type, expected):
    @gp.udf(data_type=data_type)
    def f(x: int):
        return values[x]

    assert f.evaluate(pa.record_batch({"x": list(range(len(values)))}), ["x"]).to_pylist() == expected


def test_overflowing_python_results_are_rejected():
    with pytest.raises(UDFCallError, match="declared type int32"):
        gp.udf(lambda x: 2 ** 40, data_type=pa.int32()).evaluate(pa.record_batch({"x": [1]}), ["x"])


class _NoCall:
    def compute(self, x: int) -> int:
        return x


def _keyword_only(x: int, *, scale: int) -> int:
    return x * scale


def _only_args(*cols) -> int:
    return len(cols)


def _only_kwargs(**cols) -> int:
    return len(cols)


@pytest.mark.parametrize(("func", "needles"), [
    (_NoCall, ["'_NoCall'", "no __call__"]),
    (_keyword_only, ["'_keyword_only'", "keyword-only", "['scale']"]),
    (_only_args, ["'_only_args'", "*cols", "cannot be inferred"]),
    (_only_kwargs, ["'_only_kwargs'", "**cols", "cannot be inferred"]),
])
def test_udfs_that_cannot_run_are_refused_when_declared(func, needles):
    with pytest.raises(gp.UDFDefinitionError) as exc:
        gp.udf(data_type=pa.int64())(func)
    for needle in needles:
        assert needle in str(exc.value)


def test_udfs_with_defaults_and_extra_varargs_still_work():
    class Scaled:
        def __init__(self, k: int = 3) -> None:
            self.k = k

        def __call__(self, x: int, *, unused: int = 0) -> int:
            return x * self.k

    def first(x: int, *rest, **options) -> int:
        return x + 1

    batch = pa.record_batch({"x": [1, 2]})
    assert gp.udf(data_type=pa.int64())(Scaled).evaluate(batch, ["x"]).to_pylist() == [3, 6]
    assert gp.udf(first).input_columns == ["x"]
    assert gp.udf(first).evaluate(batch, ["x"]).to_pylist() == [2, 3]


@pytest.mark.parametrize("bad", [[1], "x", [""], ["x", None], 5])
def test_input_columns_must_be_a_list_of_names(bad):
    def f(x: int) -> int:
        return x

    with pytest.raises(gp.UDFDefinitionError) as exc:
        gp.udf(f, data_type=pa.int64(), input_columns=bad)
    assert "UDF 'f'" in str(exc.value) and f"input_columns must be a list of non-empty column names, got {bad!r}" \
        in str(exc.value)


@pytest.mark.parametrize(("policy", "needle"), [
    (gp.Skip(max_fraction="0.1"), "max_fraction must be a number within [0, 1], got '0.1'"),
    (gp.Skip(max_fraction=float("nan")), "max_fraction must be a number within [0, 1], got nan"),
    (gp.Skip(max_rows="5"), "max_rows must be an integer >= 0, got '5'"),
    (gp.Skip(max_rows=True), "max_rows must be an integer >= 0, got True"),
    (gp.Skip(match=5), "match must be a regular expression string, got 5"),
    (gp.Retry(initial_seconds="1"), "initial_seconds must be a number >= 0, got '1'"),
    (gp.Retry(max_seconds=None), "max_seconds must be a number >= 0, got None"),
    (gp.Retry(max_attempts=True), "max_attempts must be an integer >= 1, got True"),
    (gp.Retry(max_attempts=2.0), "max_attempts must be an integer >= 1, got 2.0"),
])
def test_error_policy_values_are_checked_when_declared(policy, needle):
    def f(x: int) -> int:
        return x

    with pytest.raises(gp.UDFDefinitionError) as exc:
        gp.udf(f, on_error=[gp.Retry(TimeoutError), policy])
    assert needle in str(exc.value)


def test_valid_error_policy_values_are_kept():
    skip = gp.Skip(ValueError, match="bad", max_rows=0, max_fraction=1)
    retry = gp.Retry(TimeoutError, max_attempts=2, initial_seconds=0, max_seconds=0.5)
    assert gp.udf(lambda x: x, data_type=pa.int64(), on_error=[retry, skip]).on_error.matchers == (retry, skip)

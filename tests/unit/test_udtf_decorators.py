"""Decorator arguments refused at decoration, and a chunker's rows held to its declared schema (no Spark).

Every bad argument of ``@chunker`` / ``@scalar_udtf`` / ``@udtf`` (and the ``@udf`` arguments that share
their checks) raises :class:`UDFDefinitionError` when the function is decorated, naming the function and
the argument -- not at the first refresh, as a schema mismatch.  The rows tests call ``UDTF.expand`` the
way a Spark task does: one call per batch of parents, failures listed per parent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.error_policy import RowFailure
from geneva_provider.core.functions.udf import UDFCallError
from geneva_provider.core.functions.udtf import UDTF, UDTFRowError


@dataclass
class Piece:
    text: str
    start: int


class Span(NamedTuple):
    start: int
    ends: list[int]


def split(text: str) -> Iterator[Piece]:
    yield Piece(text, 0)


def split_arrays(text: pa.Array) -> pa.RecordBatch:
    return pa.record_batch({"text": text, "__parent_index": pa.array(range(len(text)), pa.int64())})


def per_group(batches: Any) -> Iterator[pa.RecordBatch]:
    yield pa.record_batch({"n": pa.array([1], pa.int64())})


N = pa.schema([("n", pa.int64())])
TEXT = pa.schema([("text", pa.string())])
Blank = TypedDict("Blank", {"": int})  # a row type whose field name is empty (TypedDict's functional form)


def blank_rows(text: str) -> Iterator[Blank]:
    yield {"": 1}


CASES: list[tuple[str, Callable[[], Any], str]] = [
    # batch: a bool, not anything truthy
    ("batch-str", lambda: gp.chunker(batch="no", output_schema=TEXT)(split_arrays),
     r"chunker 'split_arrays': batch must be True or False, got 'no'"),
    ("batch-int", lambda: gp.chunker(batch=1, output_schema=TEXT)(split_arrays), r"'split_arrays': batch .* got 1"),
    ("batch-none", lambda: gp.chunker(batch=None)(split), r"chunker 'split': batch must be True or False, got None"),
    ("scalar-udtf-batch", lambda: gp.scalar_udtf(batch="yes")(split), r"chunker 'split': batch .* 'yes'"),
    # output column names: non-empty strings, from output_schema= or a row type
    ("empty-column", lambda: gp.chunker(output_schema=pa.schema([("", pa.int64())]))(split),
     r"chunker 'split': output column names must be non-empty strings, got ''"),
    ("blank-column", lambda: gp.chunker(output_schema=pa.schema([("n", pa.int64()), ("  ", pa.string())]))(split),
     r"chunker 'split': output column names must be non-empty strings, got '  '"),
    ("empty-dict-key", lambda: gp.chunker(output_schema={"": int})(split), r"chunker 'split': output column names"),
    ("int-dict-key", lambda: gp.chunker(output_schema={1: int})(split), r"chunker 'split': output column names.* 1"),
    ("empty-row-field", lambda: gp.chunker(blank_rows), r"chunker 'blank_rows': output column names .* ''"),
    ("udtf-empty-column", lambda: gp.udtf(output_schema=pa.schema([("", pa.int64())]))(per_group),
     r"UDTF 'per_group': output column names must be non-empty strings"),
    ("schema-list", lambda: gp.chunker(output_schema=[("n", pa.int64())])(split),
     r"chunker 'split': output_schema must be a non-empty pyarrow Schema"),
    ("schema-empty", lambda: gp.udtf(output_schema=pa.schema([]))(per_group), r"UDTF 'per_group': output_schema"),
    ("udtf-no-schema", lambda: gp.udtf(per_group), r"UDTF 'per_group': .*output_schema="),
    # input_columns: a list of non-empty names, one per parameter
    ("inputs-str", lambda: gp.chunker(input_columns="text")(split), r"chunker 'split': input_columns must be a list"),
    ("inputs-empty-name", lambda: gp.chunker(input_columns=[""])(split), r"chunker 'split': input_columns .*\[''\]"),
    ("inputs-int", lambda: gp.chunker(input_columns=[1])(split), r"chunker 'split': input_columns .*\[1\]"),
    ("inputs-twice", lambda: gp.udtf(output_schema=N, input_columns=["a", "a"])(per_group),
     r"UDTF 'per_group': input_columns names a column twice"),
    ("inputs-none-for-one", lambda: gp.chunker(input_columns=[])(split),
     r"chunker 'split' takes 1 parameters but input_columns names 0"),
    # name, version, partition_by: non-empty strings
    ("name-empty", lambda: gp.chunker(name="")(split), r"chunker 'split': name must be a non-empty string, got ''"),
    ("name-int", lambda: gp.chunker(name=3)(split), r"chunker 'split': name must be a non-empty string, got 3"),
    ("version-empty", lambda: gp.udtf(output_schema=N, version=" ")(per_group),
     r"UDTF 'per_group': version must be a non-empty string"),
    ("partition-empty", lambda: gp.udtf(output_schema=N, partition_by="")(per_group),
     r"UDTF 'per_group': partition_by must be a non-empty string, got ''"),
    ("partition-list", lambda: gp.udtf(output_schema=N, partition_by=["lang"])(per_group),
     r"UDTF 'per_group': partition_by must be a non-empty string, got \['lang'\]"),
    # num_cpus / num_gpus / memory: positive numbers of the right kind (num_gpus=0 is the reference's "no GPU")
    ("gpus-negative", lambda: gp.chunker(num_gpus=-1)(split),
     r"chunker 'split': num_gpus must be a positive number, got -1"),
    ("gpus-str", lambda: gp.chunker(num_gpus="1")(split), r"chunker 'split': num_gpus .* got '1'"),
    ("gpus-bool", lambda: gp.chunker(num_gpus=True)(split), r"chunker 'split': num_gpus must be a positive number"),
    ("cpus-zero", lambda: gp.chunker(num_cpus=0)(split), r"chunker 'split': num_cpus .* got 0; leave it out"),
    ("gpus-nan", lambda: gp.udtf(output_schema=N, num_gpus=math.nan)(per_group), r"UDTF 'per_group': num_gpus"),
    ("gpus-fraction-above-one", lambda: gp.chunker(num_gpus=1.5)(split), r"chunker 'split': num_gpus .* fraction"),
    ("cpus-fraction", lambda: gp.chunker(num_cpus=1.5)(split), r"chunker 'split': num_cpus must be a whole number"),
    ("cpus-negative", lambda: gp.udtf(output_schema=N, num_cpus=-2)(per_group), r"UDTF 'per_group': num_cpus"),
    ("memory-negative", lambda: gp.chunker(memory=-1)(split), r"chunker 'split': memory must be a positive number"),
    ("memory-words", lambda: gp.chunker(memory="lots")(split), r"chunker 'split': memory .* got 'lots'"),
    ("memory-bool", lambda: gp.chunker(memory=True)(split),
     r"chunker 'split': memory must be a positive number of bytes"),
    # on_error: an error policy, checked naming the function even when no name= is given
    ("on-error-str", lambda: gp.chunker(on_error="skip")(split), r"chunker 'split': on_error must be a Retry"),
    ("on-error-list", lambda: gp.udtf(output_schema=N, on_error=[gp.Skip(), "x"])(per_group),
     r"UDTF 'per_group': on_error takes Retry, Skip and Fail matchers, got 'x'"),
    ("on-error-attempts", lambda: gp.chunker(on_error=gp.Retry(max_attempts=0))(split),
     r"chunker 'split': max_attempts must be an integer >= 1, got 0"),
    ("udf-on-error", lambda: gp.udf(data_type=pa.int64(), on_error="skip")(lambda x: x),
     r"UDF '<lambda>': on_error must be a Retry"),
    ("udf-gpus-negative", lambda: gp.udf(data_type=pa.int64(), num_gpus=-1)(lambda x: x),
     r"UDF '<lambda>': num_gpus must be a positive number"),
    # the function itself
    ("udtf-two-params", lambda: gp.udtf(output_schema=N)(lambda a, b: iter([])),
     r"UDTF '<lambda>' must take exactly one parameter"),
    ("not-callable", lambda: gp.chunker(output_schema=N)(42), r"@chunker needs a function"),
]


@pytest.mark.parametrize(("make", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_decorator_argument_is_refused_at_decoration_naming_the_function_and_the_argument(make, match):
    with pytest.raises(gp.UDFDefinitionError, match=match):
        make()


def test_good_arguments_pass():
    made = gp.chunker(batch=False, input_columns=("text",), on_error=[gp.Retry(TimeoutError), gp.Skip()])(split)
    assert made.resources is None and made.input_columns == ["text"] and not made.batch
    assert gp.chunker(num_gpus=0.5, memory="1g")(split).resources.describe() == "num_gpus=0.5, memory=1g"
    assert gp.chunker(num_gpus=0)(split).resources is None  # the reference's "no GPU"
    assert gp.chunker(num_gpus=0.0, memory="1g")(split).resources.describe() == "memory=1g"
    batch = gp.scalar_udtf(batch=True, output_schema=TEXT)(split_arrays)
    assert batch.batch is True and batch.output_schema == TEXT
    # The view stores every output column nullable (a skipped parent leaves a marker row), whatever is declared.
    assert all(f.nullable for f in gp.chunker(split).output_schema)
    assert [f.nullable for f in gp.chunker(split).declared_schema] == [False, False]


# ---------------------------------------------------------------------- rows held to the declared schema
DOCS = pa.table({"doc_id": list(range(8)), "text": [f"doc {i}" for i in range(8)]})


def expand(fn: UDTF) -> tuple[list[dict[str, Any]], list[int], list[RowFailure]]:
    failures: list[RowFailure] = []
    table, parents = fn.expand(DOCS, failures)
    return table.to_pylist(), parents.tolist(), failures


def test_a_nested_misfit_or_a_none_for_a_required_field_is_its_parent_failure_alone():
    @gp.chunker(on_error=gp.skip_on_error())
    def spans(doc_id: int) -> Iterator[Span]:
        yield Span(doc_id, [doc_id, "end" if doc_id == 2 else doc_id + 1])  # type: ignore[list-item]
        yield Span(None if doc_id == 5 else doc_id, [])  # type: ignore[arg-type]

    rows, parents, failures = expand(spans)
    assert parents == [i for i in range(8) if i not in (2, 5) for _ in range(2)]
    assert rows[:2] == [{"start": 0, "ends": [0, 1]}, {"start": 0, "ends": []}]
    assert [(f.index, f.outcome, f.error_type) for f in failures] == [(2, RowOutcome.SKIPPED, "UDTFRowError"),
                                                                      (5, RowOutcome.SKIPPED, "UDTFRowError")]
    assert "field 'ends[1]' holds a str ('end'), which does not fit its declared type int64" in failures[0].message
    assert "chunker 'spans' yielded None for 'start', which its output schema declares not nullable" in (
        failures[1].message)

    nested = pa.schema([("span", pa.struct([pa.field("start", pa.int64(), nullable=False),
                                            pa.field("label", pa.string())]))])

    @gp.chunker(output_schema=nested, on_error=gp.skip_on_error())
    def labelled(doc_id: int) -> Iterator[dict[str, Any]]:
        yield {"span": {"start": None if doc_id == 3 else doc_id, "label": None}}  # label is nullable

    rows, parents, failures = expand(labelled)
    assert parents == [i for i in range(8) if i != 3]
    assert [f.index for f in failures] == [3] and "None for 'span.start'" in failures[0].message


def test_under_the_default_policy_the_first_misfit_fails_naming_the_parent_and_the_field():
    @gp.chunker
    def typed(doc_id: int, text: str) -> Iterator[Piece]:
        yield Piece(text, 0)
        yield Piece(text, "four" if doc_id == 4 else 1)  # type: ignore[arg-type]

    failures: list[RowFailure] = []
    with pytest.raises(UDFCallError, match=r"UDTFRowError: chunker 'typed' yielded a row whose field 'start' holds "
                                           r"a str \('four'\), which does not fit its declared type int64") as err:
        typed.expand(DOCS, failures)
    assert err.value.index == 4
    assert [(f.index, f.outcome) for f in failures] == [(4, RowOutcome.FAILED)]

    @gp.chunker(on_error=gp.Skip(ValueError))  # a policy naming ValueError (or TypeError) takes the misfit
    def by_value_error(doc_id: int) -> Iterator[Piece]:
        yield Piece("x", "four" if doc_id == 4 else doc_id)  # type: ignore[arg-type]

    assert expand(by_value_error)[1] == [0, 1, 2, 3, 5, 6, 7]
    assert isinstance(UDTFRowError("x"), TypeError) and isinstance(UDTFRowError("x"), ValueError)


def test_a_retry_calls_the_chunker_again_for_the_misfit_parent_only():
    calls: list[int] = []

    @gp.chunker(on_error=gp.Retry(max_attempts=2, backoff="fixed", initial_seconds=0))
    def flaky(doc_id: int) -> Iterator[Piece]:
        calls.append(doc_id)
        yield Piece("x", "late" if doc_id == 6 and calls.count(6) == 1 else doc_id)  # type: ignore[arg-type]

    rows, parents, failures = expand(flaky)
    assert parents == list(range(8)) and [r["start"] for r in rows] == list(range(8))
    assert calls == [*range(8), 6]  # every parent once, then the misfit one again
    assert [(f.index, f.outcome, f.attempts) for f in failures] == [(6, RowOutcome.RECOVERED, 2)]


def test_a_batch_chunker_returning_misfit_values_skips_only_their_parents():
    @gp.chunker(batch=True, on_error=gp.skip_on_error(),
                output_schema=pa.schema([("n", pa.int64()), ("tag", pa.string())]))
    def numbers(doc_id: pa.Array) -> pa.RecordBatch:
        ids = doc_id.to_pylist()
        # parents listed out of order, three rows each; doc 6's values are not numbers
        order = [i for k in (2, 1, 0) for i in range(len(ids)) if i % 3 == k]
        return pa.record_batch({"n": [("six" if ids[i] == 6 else str(ids[i] * 10 + j)) for i in order
                                      for j in range(3)],
                                "tag": [f"t{ids[i]}" for i in order for _ in range(3)],
                                "__parent_index": pa.array([i for i in order for _ in range(3)], pa.int64())})

    rows, parents, failures = expand(numbers)
    assert sorted(zip(parents, [r["n"] for r in rows], strict=True)) == [
        (i, i * 10 + j) for i in range(8) if i != 6 for j in range(3)]
    assert [(f.index, f.outcome) for f in failures] == [(6, RowOutcome.SKIPPED)]
    assert "column 'n' of type string, which does not convert to its declared type int64" in failures[0].message

    @gp.chunker(batch=True, output_schema=pa.schema([("n", pa.int64())]))
    def failing(doc_id: pa.Array) -> pa.RecordBatch:
        return pa.record_batch({"n": ["1", "x"], "__parent_index": pa.array([0, 5], pa.int64())})

    with pytest.raises(UDFCallError, match="column 'n'") as err:
        failing.expand(DOCS, [])
    assert err.value.index == 5  # the parent of the row that does not convert, not the whole batch


def test_an_empty_partition_is_one_empty_batch_of_the_input_schema():
    """What an unpartitioned aggregate sees once every source row is gone: the columns, no rows."""
    @gp.udtf(output_schema=pa.schema([("docs", pa.int64()), ("chars", pa.int64())]))
    def totals(batches: Any) -> Iterator[pa.RecordBatch]:
        rows = pa.Table.from_batches(list(batches))  # needs a batch (or a schema) to know the columns
        yield pa.record_batch({"docs": [rows.num_rows], "chars": [sum(map(len, rows.column("text").to_pylist()))]})

    @gp.udtf(output_schema=pa.schema([("docs", pa.int64())]))
    def count(table: pa.Table) -> pa.Table:
        return pa.table({"docs": [table.num_rows]})

    empty = DOCS.slice(0, 0)
    assert totals.run_partition(empty).to_pylist() == [{"docs": 0, "chars": 0}]
    assert count.run_partition(empty).to_pylist() == [{"docs": 0}]
    assert totals.run_partition(DOCS).to_pylist() == [{"docs": 8, "chars": 40}]

"""Bad input: every public entry point fails with a package error naming the culprit, and changes nothing.

Each case is a call with one bad argument against a small database (table ``events`` with
columns ``id``, ``x`` in four fragments, a backfilled UDF column ``y``, and a materialized view
``evens`` refreshed once).  The expectation is the documented behaviour (README, "Bad input fails
in the plan stage, before Spark starts, with an error naming the table, column or argument"):

* the error is a :class:`geneva_provider.GenevaError` of the expected kind, whose message names the
  culprit (the regex) and carries no Lance Rust source path;
* no Spark job ran (cases marked ``runtime`` excepted: the UDF has to run to fail);
* nothing changed: table versions, schema and field metadata, checkpoint store keys, the table
  names and every file under the database (``runtime`` cases may leave their job's plan, record,
  batch checkpoints and error store, never a commit).

The database is built once per module and rebuilt only after a case changed it (or ran a job).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import GenevaError, JobNotFoundError
from geneva_provider.core.store.layout import JobStore
from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.backfill import (
    GenevaAddColumnsOperator,
    GenevaPlanBackfillOperator,
    GenevaVerifyOperator,
)
from geneva_provider.operators.maintenance import GenevaCleanupCheckpointsOperator, GenevaPlanCompactionOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.views import GenevaCreateMaterializedViewOperator, GenevaPlanRefreshOperator

CONN = "geneva_bad_inputs"  # a lance connection to the module's database (set by the fixture)
RUST_PATH = re.compile(r"/home/runner/work/|\.rs:\d+")


# ---------------------------------------------------------------------- UDFs
@gp.udf(data_type=pa.int64())
def double(x: int) -> int:
    return x * 2


DOUBLE = f"{__name__}:double"  # the UDF by reference, as a DAG names it


@gp.udf(data_type=pa.int64(), input_columns=["x"])
def plus_one(x: pa.Array) -> pa.Array:
    return pc.add(x, 1)


@gp.udf(data_type=pa.int64(), name="double")
def double_fixed(x: int) -> int:
    return x + x


@gp.udf(data_type=pa.float64())
def as_float(x: int) -> float:
    return float(x)


@gp.udf(data_type=pa.int64(), input_columns=["nope"])
def reads_nope(nope: pa.Array) -> pa.Array:
    return nope


@gp.udf(data_type=pa.month_day_nano_interval(), input_columns=["x"])
def interval(x: pa.Array) -> pa.Array:
    return pa.nulls(len(x), pa.month_day_nano_interval())


@gp.udf(data_type=pa.int64())
def returns_text(x: int) -> int:
    return f"row {x}"  # type: ignore[return-value]


@gp.udf(data_type=pa.int64(), input_columns=["x"])
def drops_a_row(x: pa.Array) -> pa.Array:
    return x.slice(1)


@gp.udf(data_type=pa.int64())
def raises(x: int) -> int:
    raise ValueError(f"cannot parse row {x}")


@gp.udf(data_type=pa.int64(), on_error=gp.Skip(max_rows=0))
def skips_too_many(x: int) -> int:
    raise ValueError(f"cannot parse row {x}")


@gp.udf(data_type=pa.int64())
class FailsToLoad:
    def __init__(self) -> None:
        raise RuntimeError("model weights not found")

    def __call__(self, x: int) -> int:
        return x


def plain(x: int) -> int:
    return x


def untyped(x):
    return x


def batch_two(batch: pa.RecordBatch, extra: int) -> pa.Array:
    return batch.column(0)


def udf_closing_over_a_lock() -> gp.UDF:
    lock = threading.Lock()

    @gp.udf(data_type=pa.int64())
    def locked(x: int) -> int:
        with lock:
            return x

    return locked


# ---------------------------------------------------------------------- the database
@dataclasses.dataclass
class Ctx:
    """What a case calls into: the database, its Spark session and a scratch directory outside it."""

    db: Any
    spark: Any
    root: Path
    scratch: Path

    @property
    def tbl(self) -> Any:
        return self.db.open_table("events")

    @property
    def view(self) -> Any:
        return self.db.open_table("evens")

    def query(self) -> Any:
        return self.tbl.search(None).select({"id": "id", "x": "x"})

    def plan_uri(self, name: str = "plan-20260101T000000-deadbeef.lance") -> str:
        return f"{self.tbl.uri}/_checkpoints/{name}"


def build_lake(root: Path, spark: Any) -> Ctx:
    root.mkdir(parents=True)
    scratch = root.parent / f"{root.name}-scratch"
    scratch.mkdir()
    db = gp.connect(str(root / "db"))
    tbl = db.create_table("events", {"id": list(range(40)), "x": [3 * i for i in range(40)]}, max_rows_per_file=10)
    tbl.add_columns({"y": double})
    tbl.backfill("y", spark=spark, progress=False)
    view = db.create_materialized_view("evens", tbl.search(None).where("x % 2 = 0").select(
        {"id": "id", "y": "y", "z": plus_one}))
    view.refresh(spark=spark, progress=False)
    os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = json.dumps({"conn_type": "lance", "host": db.uri})
    return Ctx(db, spark, root / "db", scratch)


def _field_facts(schema: pa.Schema) -> list[tuple[str, str, dict[Any, Any] | None]]:
    return [(f.name, str(f.type), f.metadata) for f in schema]


def snapshot(ctx: Ctx) -> dict[str, Any]:
    """Everything a bad call must leave as it was."""
    out: dict[str, Any] = {"tables": ctx.db.table_names()}
    for name in ("events", "evens"):
        if name not in out["tables"]:
            continue
        t = ctx.db.open_table(name)
        ds = t.dataset()
        out[name] = {"version": ds.version, "rows": ds.count_rows(), "schema_metadata": ds.schema.metadata,
                     "fields": _field_facts(ds.schema), "fragments": [f.fragment_id for f in ds.get_fragments()],
                     "checkpoint_keys": sorted(t.checkpoint_store.list_keys())}
    out["files"] = sorted(str(p.relative_to(ctx.root)) for p in ctx.root.rglob("*"))
    return out


def committed_state(snap: dict[str, Any]) -> dict[str, Any]:
    """What even a failed job must not change: versions, schemas, rows, table names."""
    keep = ("version", "rows", "schema_metadata", "fields", "fragments")
    return {"tables": snap["tables"],
            **{n: {k: snap[n][k] for k in keep} for n in ("events", "evens") if n in snap}}


def spark_jobs(spark: Any) -> int:
    """How many Spark jobs the session has started."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


# ---------------------------------------------------------------------- command-line programs
class CliFailure(Exception):
    """A spark-submit program exited non-zero (its output is the message)."""

    def __init__(self, code: int, output: str) -> None:
        super().__init__(f"exit code {code}: {output[-3000:]}")
        self.code = code
        self.output = output


def cli(app: str, *args: str) -> None:
    """Runs ``python -m geneva_provider.spark_apps.<app> args``; CliFailure when it exits non-zero."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_SUBMIT", "SPARK_MASTER"))}
    proc = subprocess.run([sys.executable, "-m", f"geneva_provider.spark_apps.{app}", *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd="/")
    if proc.returncode != 0:
        raise CliFailure(proc.returncode, proc.stdout + proc.stderr)


SPARK_STARTED = re.compile(r"SparkContext|Running Spark version|master URL|log4j2-defaults|NativeCodeLoader|py4j")


# ---------------------------------------------------------------------- helpers used by cases
def op_ctx() -> dict[str, Any]:
    return {}


def summary(ctx: Ctx, **changes: Any) -> dict[str, Any]:
    """A well-formed plan summary (as XCom carries it) with ``changes``."""
    return {"job_id": "20260101T000000-deadbeef", "plan_uri": ctx.plan_uri(), "table": "events", "column": "y",
            "read_version": 1, "rows_to_compute": 10, "rows_reused": 0, "tasks": 1, "fragments_to_compute": 1,
            "fragments_reused": 0, "fragments_done": 0, "nothing_to_do": False, **changes}


def garbage_plan(ctx: Ctx) -> str:
    """A plan URI whose document is not JSON (in a store outside the database)."""
    jobs = JobStore(gp.LanceCheckpointStore(str(ctx.scratch / "store")))
    jobs.put_plan("20260101T000000-0badf00d", "garbage{")
    return jobs.plan_uri("20260101T000000-0badf00d")


def set_conn(name: str, value: dict[str, Any]) -> None:
    os.environ[f"AIRFLOW_CONN_{name.upper()}"] = json.dumps(value)


def hook_database(conn_id: str) -> Any:
    return LanceHook(conn_id).database.table_names()


def old_version(ctx: Ctx) -> int:
    """The first version of ``events`` (before ``y`` was declared)."""
    return ctx.tbl.dataset().versions()[0]["version"]


def a_file(ctx: Ctx) -> Path:
    """A regular file outside the database."""
    path = ctx.scratch / "a-file"
    path.write_text("not a database")
    return path


def stages() -> Any:
    from geneva_provider import stages as s

    return s


# ---------------------------------------------------------------------- the cases
@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Ctx], Any]
    error: type[BaseException]
    match: str                         # a regex the message must match: it names the culprit
    runtime: bool = False              # a Spark job runs before the UDF fails (the column is added by setup)
    setup: Callable[[Ctx], Any] | None = None


IAE, CE, UDE, UEE, TNF = (gp.InvalidArgumentError, gp.ColumnError, gp.UDFDefinitionError, gp.UDFExecutionError,
                          gp.TableNotFoundError)

CASES = [
    # -------------------------------------------------------------- connect / create / open / drop
    Case("connect-empty-uri", lambda c: gp.connect(""), IAE, r"uri"),
    Case("connect-uri-not-str", lambda c: gp.connect(123), IAE, r"uri.*123|123.*uri"),
    Case("connect-bad-namespace-impl",
         lambda c: gp.connect(str(c.scratch / "x"), namespace_impl="no_such.Namespace").table_names(),
         IAE, r"no_such\.Namespace"),
    Case("create-name-empty", lambda c: c.db.create_table("", {"a": [1]}), IAE, r"invalid table name ''"),
    Case("create-name-slash", lambda c: c.db.create_table("a/b", {"a": [1]}), IAE, r"'a/b'"),
    Case("create-name-dotdot", lambda c: c.db.create_table("../x", {"a": [1]}), IAE, r"'\.\./x'"),
    Case("create-name-space", lambda c: c.db.create_table("my table", {"a": [1]}), IAE, r"'my table'"),
    Case("create-name-int", lambda c: c.db.create_table(5, {"a": [1]}), IAE, r"table name 5"),
    Case("create-name-lance-suffix", lambda c: c.db.create_table("t.lance", {"a": [1]}), IAE, r"'t\.lance'"),
    Case("create-existing", lambda c: c.db.create_table("events", {"a": [1]}), IAE, r"'events' already exists"),
    Case("create-mode-bogus", lambda c: c.db.create_table("t", {"a": [1]}, mode="bogus"), IAE, r"mode.*'bogus'"),
    Case("create-max-rows-zero", lambda c: c.db.create_table("t", {"a": [1]}, max_rows_per_file=0), IAE,
         r"max_rows_per_file.*0"),
    Case("create-max-rows-str", lambda c: c.db.create_table("t", {"a": [1]}, max_rows_per_file="10"), IAE,
         r"max_rows_per_file.*'10'"),
    Case("create-data-none", lambda c: c.db.create_table("t", None), IAE, r"table 't'.*data|data.*table 't'"),
    Case("create-data-str", lambda c: c.db.create_table("t", "hello"), IAE, r"table 't'.*data|data.*table 't'"),
    Case("create-data-ragged", lambda c: c.db.create_table("t", {"a": [1, 2], "b": [1]}), IAE,
         r"table 't'.*(length|rows)"),
    Case("create-data-no-columns", lambda c: c.db.create_table("t", []), IAE, r"table 't'.*column"),
    Case("open-missing", lambda c: c.db.open_table("nope"), TNF, r"'nope' not found"),
    Case("open-bad-name", lambda c: c.db.open_table("../events"), IAE, r"'\.\./events'"),
    Case("drop-missing", lambda c: c.db.drop_table("nope"), TNF, r"'nope' not found"),
    Case("drop-bad-name", lambda c: c.db.drop_table("a/b"), IAE, r"'a/b'"),
    Case("table-uri-missing", lambda c: c.db.table_uri("nope"), TNF, r"'nope'"),
    Case("connect-namespace-properties-str", lambda c: gp.connect(str(c.scratch / "x"), namespace_properties="x"),
         IAE, r"namespace_properties.*'x'"),
    Case("connect-path-is-a-file", lambda c: gp.connect(str(a_file(c))), IAE, r"a-file.*not a database directory"),
    Case("create-stable-row-ids-str", lambda c: c.db.create_table("t", {"a": [1]}, stable_row_ids="yes"), IAE,
         r"'t'.*stable_row_ids.*'yes'"),
    Case("create-duplicate-columns",
         lambda c: c.db.create_table("t", pa.table([pa.array([1]), pa.array([2])], names=["a", "a"])), IAE,
         r"'t'.*duplicate.*'a'"),
    Case("create-rowid-column", lambda c: c.db.create_table("t", {"_rowid": [1]}), IAE, r"'t'.*'_rowid'"),
    Case("create-dotted-column", lambda c: c.db.create_table("t", {"a.b": [1]}), IAE, r"'t'.*'a\.b'"),
    Case("create-fingerprint-column", lambda c: c.db.create_table("t", {"__geneva_fp__a": [1]}), IAE,
         r"'t'.*'__geneva_fp__a'"),
    Case("create-unsupported-type",
         lambda c: c.db.create_table("t", pa.table({"a": pa.nulls(1, pa.month_day_nano_interval())})), IAE,
         r"'t'.*'a'.*interval"),
    # -------------------------------------------------------------- add / delete / count_rows / to_arrow
    Case("add-unknown-column", lambda c: c.tbl.add({"nope": [1]}), IAE, r"events.*nope|nope.*events"),
    Case("add-wrong-type", lambda c: c.tbl.add({"id": ["a"], "x": ["b"]}), IAE, r"events.*(id|x)"),
    Case("add-none", lambda c: c.tbl.add(None), IAE, r"events"),
    Case("add-fingerprint-column", lambda c: c.tbl.add({"id": [1], "x": [1], "__geneva_fp__y": [5]}), IAE,
         r"events.*__geneva_fp__y"),
    Case("delete-semicolon", lambda c: c.tbl.delete("x > 100; OR TRUE"), IAE, r"'x > 100; OR TRUE'.*';'"),
    Case("delete-trailing-garbage", lambda c: c.tbl.delete("x > 100 garbage"), IAE,
         r"'x > 100 garbage'.*ignore"),
    Case("delete-unbalanced-parenthesis", lambda c: c.tbl.delete("x > 100) OR (true"), IAE,
         r"'x > 100\) OR \(true'.*'\)'"),
    Case("count-rows-filter-int", lambda c: c.tbl.count_rows(5), IAE, r"events.*filter.*5"),
    Case("count-rows-aggregate", lambda c: c.tbl.count_rows("sum(x) > 3"), IAE, r"'sum\(x\) > 3'.*events"),
    Case("count-rows-semicolon", lambda c: c.tbl.count_rows("x > 1; garbage"), IAE, r"'x > 1; garbage'"),
    Case("to-arrow-filter-int", lambda c: c.tbl.to_arrow(filter=5), IAE, r"events.*filter.*5"),
    Case("delete-bad-sql", lambda c: c.tbl.delete("x <<>> 3"), IAE, r"x <<>> 3"),
    Case("delete-unknown-column", lambda c: c.tbl.delete("nope = 1"), IAE, r"nope"),
    Case("delete-empty-filter", lambda c: c.tbl.delete(""), IAE, r"events.*(filter|where)|(filter|where).*events"),
    Case("count-rows-bad-filter", lambda c: c.tbl.count_rows("x >"), IAE, r"'x >'"),
    Case("count-rows-unknown-column", lambda c: c.tbl.count_rows("nope > 1"), IAE, r"nope"),
    Case("to-arrow-unknown-column", lambda c: c.tbl.to_arrow(["id", "nope"]), CE, r"'nope'.*events"),
    Case("to-arrow-columns-str", lambda c: c.tbl.to_arrow("id"), IAE, r"columns.*'id'"),
    Case("to-arrow-bad-filter", lambda c: c.tbl.to_arrow(filter="x >"), IAE, r"'x >'"),
    Case("drop-columns-unknown", lambda c: c.tbl.drop_columns(["nope"]), CE, r"'nope'.*events"),
    Case("drop-columns-none", lambda c: c.tbl.drop_columns(None), IAE, r"events.*columns.*None"),
    Case("drop-columns-empty", lambda c: c.tbl.drop_columns([]), IAE, r"events.*columns.*\[\]"),
    Case("drop-columns-str", lambda c: c.tbl.drop_columns("y"), IAE, r"events.*columns.*'y'"),
    Case("drop-columns-every-column", lambda c: c.tbl.drop_columns(["id", "x", "y"]), IAE,
         r"events.*every column"),
    Case("drop-columns-udf-input", lambda c: c.tbl.drop_columns(["x"]), CE, r"\['x'\].*events.*'y' reads"),
    Case("drop-columns-fingerprint", lambda c: c.tbl.drop_columns(["__geneva_fp__y"]), CE,
         r"'__geneva_fp__y'.*events"),
    Case("drop-columns-view-bookkeeping", lambda c: c.view.drop_columns(["__is_set"]), CE, r"'__is_set'.*evens"),
    # -------------------------------------------------------------- add_columns
    Case("add-columns-not-udf", lambda c: c.tbl.add_columns({"z": plain}), IAE, r"column 'z'.*@udf"),
    Case("add-columns-lambda", lambda c: c.tbl.add_columns({"z": lambda x: x}), IAE, r"column 'z'"),
    Case("add-columns-existing-udf-column", lambda c: c.tbl.add_columns({"y": double_fixed}), CE,
         r"'y' already exists.*version"),
    Case("add-columns-existing-plain-column", lambda c: c.tbl.add_columns({"x": double}), CE,
         r"'x' already exists"),
    Case("add-columns-fingerprint-name", lambda c: c.tbl.add_columns({"__geneva_fp__y": double}), CE,
         r"__geneva_fp__y"),
    Case("add-columns-empty-name", lambda c: c.tbl.add_columns({"": double}), IAE, r"column ''|name"),
    Case("add-columns-unknown-input", lambda c: c.tbl.add_columns({"z": (double, ["nope"])}), CE,
         r"column 'z'.*\['nope'\]"),
    Case("add-columns-wrong-arity", lambda c: c.tbl.add_columns({"z": (double, ["x", "id"])}), IAE,
         r"column 'z'.*1 inputs"),
    Case("add-columns-inputs-str", lambda c: c.tbl.add_columns({"z": (double, "id")}), IAE, r"column 'z'.*'id'"),
    Case("add-columns-short-tuple", lambda c: c.tbl.add_columns({"z": (double,)}), IAE, r"column 'z'"),
    Case("add-columns-lock", lambda c: c.tbl.add_columns({"locked": udf_closing_over_a_lock()}), UDE,
         r"column 'locked'.*(lock|pickle)"),
    Case("add-columns-empty", lambda c: c.tbl.add_columns({}), IAE, r"no columns"),
    Case("add-columns-not-a-dict", lambda c: c.tbl.add_columns(["z"]), IAE, r"columns.*\['z'\]"),
    Case("add-columns-unstorable-type", lambda c: c.tbl.add_columns({"iv": interval}), UDE,
         r"column 'iv'.*interval"),
    # -------------------------------------------------------------- @udf
    Case("udf-no-type", lambda c: gp.udf(untyped), UDE, r"'untyped'.*data_type"),
    Case("udf-data-type-str", lambda c: gp.udf(plain, data_type="int64"), UDE, r"'plain'.*data_type.*'int64'"),
    Case("udf-data-type-factory", lambda c: gp.udf(plain, data_type=pa.int64), UDE, r"'plain'.*data_type"),
    Case("udf-not-callable", lambda c: gp.udf(5, data_type=pa.int64()), UDE, r"5"),
    Case("udf-concurrency-zero", lambda c: gp.udf(plain, concurrency=0), UDE, r"concurrency.*0"),
    Case("udf-concurrency-negative", lambda c: gp.udf(plain, concurrency=-1), UDE, r"concurrency.*-1"),
    Case("udf-concurrency-str", lambda c: gp.udf(plain, concurrency="2"), UDE, r"concurrency.*'2'"),
    Case("udf-concurrency-bool", lambda c: gp.udf(plain, concurrency=True), UDE, r"concurrency.*True"),
    Case("udf-on-error-str", lambda c: gp.udf(plain, on_error="skip"), UDE, r"on_error.*'skip'"),
    Case("udf-on-error-list-of-int", lambda c: gp.udf(plain, on_error=[1]), UDE, r"on_error.*1"),
    Case("udf-retry-zero-attempts", lambda c: gp.udf(plain, on_error=gp.Retry(max_attempts=0)), UDE,
         r"max_attempts.*0"),
    Case("udf-retry-bad-backoff", lambda c: gp.udf(plain, on_error=gp.Retry(backoff="x")), UDE, r"backoff.*'x'"),
    Case("udf-retry-negative-seconds", lambda c: gp.udf(plain, on_error=gp.Retry(initial_seconds=-1)), UDE,
         r"initial_seconds"),
    Case("udf-retry-int-exceptions", lambda c: gp.udf(plain, on_error=gp.Retry(exceptions=(int,))), UDE,
         r"exceptions.*int"),
    Case("udf-retry-exception-instance", lambda c: gp.udf(plain, on_error=gp.Retry(exceptions=ValueError("x"))), UDE,
         r"exceptions.*ValueError"),
    Case("udf-skip-fraction-2", lambda c: gp.udf(plain, on_error=gp.Skip(max_fraction=2)), UDE,
         r"max_fraction.*2"),
    Case("udf-skip-negative-rows", lambda c: gp.udf(plain, on_error=gp.Skip(max_rows=-1)), UDE, r"max_rows.*-1"),
    Case("udf-skip-bad-regex", lambda c: gp.udf(plain, on_error=gp.Skip(match="(")), UDE, r"match='\('"),
    Case("udf-batch-two-params", lambda c: gp.udf(batch_two, data_type=pa.int64()), UDE,
         r"'batch_two'.*one parameter"),
    Case("udf-input-columns-mismatch", lambda c: gp.udf(plain, data_type=pa.int64(), input_columns=["a", "b"]),
         UDE, r"'plain'.*1 parameters.*\['a', 'b'\]"),
    Case("udf-name-not-str", lambda c: gp.udf(plain, data_type=pa.int64(), name=5), UDE, r"name.*5"),
    # -------------------------------------------------------------- backfill (plan stage: before Spark)
    Case("backfill-unknown-column", lambda c: c.tbl.backfill("nope", spark=c.spark), CE, r"'nope' not found"),
    Case("backfill-plain-column", lambda c: c.tbl.backfill("x", spark=c.spark), CE, r"'x'.*not a UDF column"),
    Case("backfill-fingerprint-column", lambda c: c.tbl.backfill("__geneva_fp__y", spark=c.spark), CE,
         r"'__geneva_fp__y'"),
    Case("backfill-bad-where", lambda c: c.tbl.backfill("y", where="x >", spark=c.spark), IAE, r"'x >'"),
    Case("backfill-where-unknown-column", lambda c: c.tbl.backfill("y", where="nope > 1", spark=c.spark), IAE,
         r"nope"),
    Case("backfill-where-not-str", lambda c: c.tbl.backfill("y", where=5, spark=c.spark), IAE, r"where.*5"),
    Case("backfill-where-aggregate", lambda c: c.tbl.backfill("y", where="sum(x) > 3", spark=c.spark), IAE,
         r"'sum\(x\) > 3'.*events"),
    Case("backfill-where-semicolon",
         lambda c: c.tbl.backfill("y", where="x > 1; DROP TABLE events", spark=c.spark), IAE,
         r"'x > 1; DROP TABLE events'.*';'"),
    Case("backfill-unknown-option", lambda c: c.tbl.backfill("y", spark=c.spark, bogus=1), IAE, r"'bogus'"),
    Case("backfill-checkpoint-size-zero", lambda c: c.tbl.backfill("y", spark=c.spark, checkpoint_size=0), IAE,
         r"checkpoint_size.*0"),
    Case("backfill-checkpoint-size-negative", lambda c: c.tbl.backfill("y", spark=c.spark, checkpoint_size=-5),
         IAE, r"checkpoint_size.*-5"),
    Case("backfill-checkpoint-size-str", lambda c: c.tbl.backfill("y", spark=c.spark, checkpoint_size="abc"), IAE,
         r"checkpoint_size.*'abc'"),
    Case("backfill-checkpoint-size-float", lambda c: c.tbl.backfill("y", spark=c.spark, checkpoint_size=1.5), IAE,
         r"checkpoint_size.*1\.5"),
    Case("backfill-min-above-max",
         lambda c: c.tbl.backfill("y", spark=c.spark, min_checkpoint_size=500, max_checkpoint_size=100), IAE,
         r"min_checkpoint_size 500 > max_checkpoint_size 100"),
    Case("backfill-read-version-missing", lambda c: c.tbl.backfill("y", spark=c.spark, read_version=999), IAE,
         r"read_version.*999|999.*events"),
    Case("backfill-read-version-str", lambda c: c.tbl.backfill("y", spark=c.spark, read_version="abc"), IAE,
         r"read_version.*'abc'"),
    Case("backfill-read-version-before-column",
         lambda c: c.tbl.backfill("y", spark=c.spark, read_version=old_version(c)), CE, r"'y'.*events"),
    Case("backfill-task-size-zero", lambda c: c.tbl.backfill("y", spark=c.spark, task_size=0), IAE,
         r"task_size.*0"),
    Case("backfill-commit-granularity-negative",
         lambda c: c.tbl.backfill("y", spark=c.spark, commit_granularity=-1), IAE, r"commit_granularity.*-1"),
    Case("backfill-commit-retries-negative", lambda c: c.tbl.backfill("y", spark=c.spark, commit_retries=-1), IAE,
         r"commit_retries.*-1"),
    Case("backfill-commit-timeout-str", lambda c: c.tbl.backfill("y", spark=c.spark, commit_timeout="x"), IAE,
         r"commit_timeout.*'x'"),
    Case("backfill-concurrency-zero", lambda c: c.tbl.backfill("y", spark=c.spark, concurrency=0), IAE,
         r"concurrency.*0"),
    Case("backfill-spark-str", lambda c: c.tbl.backfill("y", spark="local"), IAE, r"spark.*'local'"),
    Case("backfill-checkpoint-store-str", lambda c: c.tbl.backfill("y", spark=c.spark, checkpoint_store="s"), IAE,
         r"checkpoint_store.*'s'"),
    Case("backfill-async-unknown-option", lambda c: c.tbl.backfill_async("y", spark=c.spark, bogus=1), IAE,
         r"'bogus'"),
    # -------------------------------------------------------------- UDF failures at run time (Spark runs)
    Case("run-wrong-type", lambda c: c.tbl.backfill("bad_type", spark=c.spark, progress=False), UEE,
         r"bad_type.*(type|convert)", runtime=True, setup=lambda c: c.tbl.add_columns({"bad_type": returns_text})),
    Case("run-wrong-length", lambda c: c.tbl.backfill("bad_len", spark=c.spark, progress=False), UEE,
         r"bad_len.*values for", runtime=True, setup=lambda c: c.tbl.add_columns({"bad_len": drops_a_row})),
    Case("run-init-raises", lambda c: c.tbl.backfill("bad_init", spark=c.spark, progress=False), UEE,
         r"bad_init.*model weights not found", runtime=True,
         setup=lambda c: c.tbl.add_columns({"bad_init": FailsToLoad})),
    Case("run-udf-raises", lambda c: c.tbl.backfill("bad_row", spark=c.spark, progress=False), UEE,
         r"bad_row.*ValueError.*cannot parse row", runtime=True,
         setup=lambda c: c.tbl.add_columns({"bad_row": raises})),
    Case("run-skip-limit-exceeded", lambda c: c.tbl.backfill("skips", spark=c.spark, progress=False), UEE,
         r"skips", runtime=True, setup=lambda c: c.tbl.add_columns({"skips": skips_too_many})),
    Case("run-view-wrong-type", lambda c: c.db.open_table("bad_view").refresh(spark=c.spark, progress=False), UEE,
         r"bad_view.*'t'|'t'.*bad_view", runtime=True,
         setup=lambda c: c.db.create_materialized_view("bad_view", c.tbl.search(None).select(
             {"id": "id", "t": returns_text}))),
    # -------------------------------------------------------------- views
    Case("view-select-unknown-column", lambda c: c.tbl.search(None).select(["id", "nope"]), CE, r"'nope'"),
    Case("view-select-udf-unknown-input", lambda c: c.tbl.search(None).select({"z": reads_nope}), CE,
         r"'z'.*\['nope'\]"),
    Case("view-select-reserved-name", lambda c: c.tbl.search(None).select({"__x": "x"}), IAE, r"'__x'"),
    Case("view-select-bad-spec", lambda c: c.tbl.search(None).select({"a": 5}), IAE, r"'a'.*5"),
    Case("view-select-rowid-name",
         lambda c: c.db.create_materialized_view("v", c.tbl.search(None).select({"_rowid": "id", "x": "x"})), IAE,
         r"'_rowid'"),
    Case("view-select-rowaddr-name", lambda c: c.tbl.search(None).select(["_rowaddr"]), IAE, r"'_rowaddr'"),
    Case("view-select-row-version-name", lambda c: c.tbl.search(None).select({"_row_created_at_version": "x"}),
         IAE, r"'_row_created_at_version'"),
    Case("view-select-source-row-id-name", lambda c: c.tbl.search(None).select({"__source_row_id": "id"}), IAE,
         r"'__source_row_id'"),
    Case("view-select-fingerprint-name", lambda c: c.tbl.search(None).select({"__geneva_fp__x": "x"}), IAE,
         r"'__geneva_fp__x'"),
    Case("view-select-empty-name", lambda c: c.tbl.search(None).select({"": "id"}), IAE, r"events.*''"),
    Case("view-select-dotted-name", lambda c: c.tbl.search(None).select({"a.b": "id"}), IAE, r"'a\.b'"),
    Case("view-select-str", lambda c: c.tbl.search(None).select("id"), IAE, r"select.*'id'"),
    Case("view-select-tuple", lambda c: c.tbl.search(None).select(("id", "x")), IAE, r"select.*\('id', 'x'\)"),
    Case("view-select-none", lambda c: c.tbl.search(None).select(None), IAE, r"select.*None"),
    Case("view-select-int-key", lambda c: c.tbl.search(None).select({5: "id"}), IAE, r"column names.*5"),
    Case("view-select-list-of-int", lambda c: c.tbl.search(None).select([5]), IAE, r"select.*\[5\]"),
    Case("view-where-int", lambda c: c.query().where(5), IAE, r"where.*5"),
    Case("view-where-aggregate", lambda c: c.db.create_materialized_view("v", c.query().where("sum(x) > 3")), IAE,
         r"'sum\(x\) > 3'.*'v'"),
    Case("view-where-semicolon", lambda c: c.db.create_materialized_view("v", c.query().where("x > 1; garbage")),
         IAE, r"'x > 1; garbage'.*'v'"),
    Case("view-search-text", lambda c: c.tbl.search("hello"), IAE, r"'hello'.*no text column.*None"),
    Case("view-no-columns", lambda c: c.db.create_materialized_view("v", c.tbl.search(None)), IAE,
         r"'v'.*no columns"),
    Case("view-bad-where", lambda c: c.db.create_materialized_view("v", c.query().where("x >")), IAE,
         r"'v'.*'x >'|'x >'.*'v'"),
    Case("view-query-not-a-query", lambda c: c.db.create_materialized_view("v", "SELECT * FROM events"), IAE,
         r"'v'.*query|query.*'v'"),
    Case("view-where-unknown-column", lambda c: c.db.create_materialized_view("v", c.query().where("nope > 1")),
         IAE, r"nope"),
    Case("view-limit-negative", lambda c: c.query().limit(-1), IAE, r"limit.*-1"),
    Case("view-offset-negative", lambda c: c.query().offset(-1), IAE, r"offset.*-1"),
    Case("view-limit-str", lambda c: c.query().limit("10"), IAE, r"limit.*'10'"),
    Case("view-shuffle-seed-str", lambda c: c.db.create_materialized_view("v", c.query().shuffle(seed="abc")), IAE,
         r"seed.*'abc'"),
    Case("view-shuffle-seed-negative", lambda c: c.db.create_materialized_view("v", c.query().shuffle(seed=-1)),
         IAE, r"seed.*-1"),
    Case("view-existing-view-name", lambda c: c.db.create_materialized_view("evens", c.query()), IAE,
         r"'evens' already exists"),
    Case("view-existing-table-name", lambda c: c.db.create_materialized_view("events", c.query()), IAE,
         r"'events' already exists"),
    Case("view-bad-name", lambda c: c.db.create_materialized_view("a/b", c.query()), IAE, r"'a/b'"),
    Case("view-max-rows-zero", lambda c: c.db.create_materialized_view("v", c.query(), max_rows_per_fragment=0),
         IAE, r"max_rows_per_fragment.*0"),
    Case("view-max-rows-str", lambda c: c.db.create_materialized_view("v", c.query(), max_rows_per_fragment="10"),
         IAE, r"'v'.*max_rows_per_fragment must be a positive integer, got '10'"),
    Case("view-unstorable-udf-type",
         lambda c: c.db.create_materialized_view("v", c.tbl.search(None).select({"iv": interval})), UDE,
         r"'iv'.*interval"),
    Case("refresh-src-version-older", lambda c: c.view.refresh(src_version=old_version(c), spark=c.spark),
         GenevaError, r"src_version 1|'y'"),
    Case("refresh-src-version-missing", lambda c: c.view.refresh(src_version=999, spark=c.spark), IAE, r"999"),
    Case("refresh-src-version-str", lambda c: c.view.refresh(src_version="abc", spark=c.spark), IAE,
         r"src_version.*'abc'"),
    Case("refresh-max-rows-zero", lambda c: c.view.refresh(max_rows_per_fragment=0, spark=c.spark), IAE,
         r"max_rows_per_fragment.*0"),
    Case("refresh-unknown-option", lambda c: c.view.refresh(spark=c.spark, where="x > 1"), IAE, r"'where'"),
    Case("refresh-spark-str", lambda c: c.view.refresh(spark="local"), IAE, r"spark.*'local'"),
    Case("refresh-not-a-view", lambda c: c.tbl.refresh(spark=c.spark), IAE, r"'events'.*not a (materialized )?view"),
    # -------------------------------------------------------------- compaction / clean-up
    Case("compact-unknown-option", lambda c: c.tbl.compact(bogus=1, spark=c.spark), IAE, r"'bogus'"),
    Case("compact-spark-str", lambda c: c.tbl.compact(spark="local"), IAE, r"spark.*'local'"),
    Case("compact-target-zero", lambda c: c.tbl.compact(target_rows_per_fragment=0, spark=c.spark), IAE,
         r"target_rows_per_fragment.*0"),
    Case("compact-target-negative", lambda c: c.tbl.compact(target_rows_per_fragment=-5, spark=c.spark), IAE,
         r"target_rows_per_fragment.*-5"),
    Case("compact-target-str", lambda c: c.tbl.compact(target_rows_per_fragment="abc", spark=c.spark), IAE,
         r"target_rows_per_fragment.*'abc'"),
    Case("cleanup-older-than-str", lambda c: c.tbl.cleanup_checkpoints(older_than="x"), IAE, r"older_than.*'x'"),
    Case("cleanup-older-than-negative", lambda c: c.tbl.cleanup_checkpoints(older_than=timedelta(days=-1)), IAE,
         r"older_than.*-1 day"),
    Case("cleanup-older-than-int", lambda c: c.tbl.cleanup_checkpoints(older_than=7), IAE, r"older_than.*7"),
    # -------------------------------------------------------------- error store and job records
    Case("get-errors-unknown-column", lambda c: c.tbl.get_errors(column="nope"), CE, r"'nope'"),
    Case("get-errors-unknown-job", lambda c: c.tbl.get_errors(job_id="nope"), JobNotFoundError, r"'nope'"),
    Case("failed-rows-unknown-column", lambda c: c.tbl.get_failed_row_addresses(column="nope"), CE, r"'nope'"),
    Case("retry-failed-unknown-column", lambda c: c.tbl.retry_failed("nope", spark=c.spark), CE, r"'nope'"),
    Case("retry-failed-nothing-recorded", lambda c: c.tbl.retry_failed("y", spark=c.spark), IAE,
         r"'y'.*no failed rows"),
    Case("retry-failed-unknown-job", lambda c: c.tbl.retry_failed("y", "nope", spark=c.spark), GenevaError,
         r"nope"),
    Case("retry-failed-udf-other-type", lambda c: c.tbl.retry_failed("y", udf=as_float, spark=c.spark), UDE,
         r"'y'.*double"),
    Case("retry-failed-udf-not-udf", lambda c: c.tbl.retry_failed("y", udf=plain, spark=c.spark), UDE,
         r"'y'.*@udf"),
    Case("retry-failed-plain-column", lambda c: c.tbl.retry_failed("x", udf=double, spark=c.spark), CE,
         r"'x'.*not a UDF column"),
    Case("retry-failed-fix-without-failures", lambda c: c.tbl.retry_failed("y", udf=double_fixed, spark=c.spark),
         IAE, r"'y'.*no failed rows"),
    Case("get-job-missing", lambda c: c.db.get_job("nope"), JobNotFoundError, r"'nope'"),
    Case("list-jobs-bad-status", lambda c: c.db.list_jobs(status="bogus"), IAE, r"status.*'bogus'"),
    Case("list-jobs-bad-kind", lambda c: c.db.list_jobs(kind="bogus"), IAE, r"kind.*'bogus'"),
    Case("list-jobs-missing-table", lambda c: c.db.list_jobs("nope"), TNF, r"'nope'"),
    # -------------------------------------------------------------- stage API
    Case("stage-apply-not-a-uri", lambda c: stages().run_apply("not-a-uri", c.spark), IAE, r"not-a-uri"),
    Case("stage-write-not-a-uri", lambda c: stages().run_write_commit("not-a-uri", c.spark), IAE, r"not-a-uri"),
    Case("stage-compaction-not-a-uri", lambda c: stages().run_compaction("not-a-uri", c.spark), IAE, r"not-a-uri"),
    Case("stage-apply-missing-plan", lambda c: stages().run_apply(c.plan_uri(), c.spark), IAE,
         r"plan not found.*deadbeef"),
    Case("stage-verify-missing-plan", lambda c: stages().verify(c.plan_uri()), IAE, r"plan not found.*deadbeef"),
    Case("stage-verify-garbage-summary", lambda c: stages().verify({"job_id": "x"}), IAE, r"plan"),
    Case("stage-load-plan-garbage-uri", lambda c: stages().load_plan("garbage"), IAE, r"'?garbage"),
    Case("stage-load-plan-garbage-document", lambda c: stages().load_plan(garbage_plan(c)), IAE,
         r"0badf00d.*not a plan"),
    Case("stage-plan-backfill-unknown-column", lambda c: stages().plan_backfill(c.tbl.ref, "nope"), CE, r"'nope'"),
    Case("stage-plan-backfill-list-options", lambda c: stages().plan_backfill(c.tbl.ref, "y", ["x > 1"]),
         IAE, r"options"),
    Case("stage-plan-backfill-dict-bad-option", lambda c: stages().plan_backfill(c.tbl.ref, "y", {"wher": "x > 1"}),
         IAE, r"unknown option.*wher"),
    Case("stage-plan-refresh-not-a-view", lambda c: stages().plan_refresh(c.tbl.ref), IAE, r"'events'"),
    # -------------------------------------------------------------- Airflow operators
    Case("op-plan-backfill-unknown-option",
         lambda c: GenevaPlanBackfillOperator(task_id="p", table="events", column="y", bogus_option=1,
                                              lance_conn_id=CONN), IAE, r"bogus_option"),
    Case("op-plan-backfill-missing-table",
         lambda c: GenevaPlanBackfillOperator(task_id="p", table="nope", column="y", lance_conn_id=CONN
                                              ).execute(op_ctx()), TNF, r"'nope'"),
    Case("op-plan-backfill-unknown-column",
         lambda c: GenevaPlanBackfillOperator(task_id="p", table="events", column="nope", lance_conn_id=CONN
                                              ).execute(op_ctx()), CE, r"'nope'"),
    Case("op-plan-backfill-bad-option-value",
         lambda c: GenevaPlanBackfillOperator(task_id="p", table="events", column="y", checkpoint_size="abc",
                                              lance_conn_id=CONN).execute(op_ctx()), IAE, r"checkpoint_size.*'abc'"),
    Case("op-plan-backfill-bad-where",
         lambda c: GenevaPlanBackfillOperator(task_id="p", table="events", column="y", where="x >",
                                              lance_conn_id=CONN).execute(op_ctx()), IAE, r"'x >'"),
    Case("op-missing-lance-connection",
         lambda c: GenevaPlanBackfillOperator(task_id="p", table="events", column="y", lance_conn_id="geneva_nope"
                                              ).execute(op_ctx()), IAE, r"geneva_nope"),
    Case("op-apply-garbage-plan",
         lambda c: GenevaSparkApplyOperator(task_id="a", plan="garbage", lance_conn_id=CONN).execute(op_ctx()), IAE,
         r"plan summary.*'garbage'"),
    Case("op-write-incomplete-plan",
         lambda c: GenevaSparkWriteCommitOperator(task_id="w", plan={"job_id": "x"}, lance_conn_id=CONN
                                                  ).execute(op_ctx()), IAE, r"plan summary"),
    Case("op-apply-plan-uri-not-a-uri",
         lambda c: GenevaSparkApplyOperator(task_id="a", plan=summary(c, plan_uri="not-a-uri"), lance_conn_id=CONN
                                            ).execute(op_ctx()), IAE, r"not-a-uri"),
    Case("op-verify-garbage-plan",
         lambda c: GenevaVerifyOperator(task_id="v", plan="garbage", lance_conn_id=CONN).execute(op_ctx()), IAE,
         r"plan summary.*'garbage'"),
    Case("op-add-columns-import-error",
         lambda c: GenevaAddColumnsOperator(task_id="c", table="events", columns={"z": "nope.nope:f"},
                                            lance_conn_id=CONN).execute(op_ctx()), UDE, r"'z'.*nope\.nope:f"),
    Case("op-add-columns-not-a-udf",
         lambda c: GenevaAddColumnsOperator(task_id="c", table="events",
                                            columns={"z": "geneva_provider.examples:sample"},
                                            lance_conn_id=CONN).execute(op_ctx()), UDE,
         r"'z'.*geneva_provider\.examples:sample"),
    Case("op-add-columns-plain-column",
         lambda c: GenevaAddColumnsOperator(task_id="c", table="events", columns={"x": DOUBLE},
                                            lance_conn_id=CONN).execute(op_ctx()), CE, r"'x'.*not a UDF column"),
    Case("op-add-columns-missing-table",
         lambda c: GenevaAddColumnsOperator(task_id="c", table="nope", columns={"z": DOUBLE},
                                            lance_conn_id=CONN).execute(op_ctx()), TNF, r"'nope'"),
    Case("op-create-view-unknown-column",
         lambda c: GenevaCreateMaterializedViewOperator(task_id="v", view="v", source_table="events",
                                                        columns={"a": "nope"}, lance_conn_id=CONN
                                                        ).execute(op_ctx()), CE, r"'nope'"),
    Case("op-create-view-redefined",
         lambda c: GenevaCreateMaterializedViewOperator(task_id="v", view="evens", source_table="events",
                                                        columns={"id": "id"}, lance_conn_id=CONN
                                                        ).execute(op_ctx()), IAE, r"'evens'.*different definition"),
    Case("op-create-view-limit-negative",
         lambda c: GenevaCreateMaterializedViewOperator(task_id="v", view="v", source_table="events",
                                                        columns={"id": "id"}, limit=-1, lance_conn_id=CONN
                                                        ).execute(op_ctx()), IAE, r"limit.*-1"),
    Case("op-plan-refresh-not-a-view",
         lambda c: GenevaPlanRefreshOperator(task_id="r", view="events", lance_conn_id=CONN).execute(op_ctx()), IAE,
         r"'events'"),
    Case("op-plan-refresh-src-version-missing",
         lambda c: GenevaPlanRefreshOperator(task_id="r", view="evens", src_version="999", lance_conn_id=CONN
                                             ).execute(op_ctx()), IAE, r"999"),
    Case("op-plan-compaction-target-str",
         lambda c: GenevaPlanCompactionOperator(task_id="c", table="events", target_rows_per_fragment="abc",
                                                lance_conn_id=CONN).execute(op_ctx()), IAE,
         r"target_rows_per_fragment.*'abc'"),
    Case("op-cleanup-older-than-str",
         lambda c: GenevaCleanupCheckpointsOperator(task_id="c", table="events", older_than="x", lance_conn_id=CONN
                                                    ).execute(op_ctx()), IAE, r"older_than.*'x'"),
    Case("hook-no-uri",
         lambda c: (set_conn("geneva_no_uri", {"conn_type": "lance"}), hook_database("geneva_no_uri")), IAE,
         r"geneva_no_uri.*URI"),
    Case("hook-storage-options-not-json",
         lambda c: (set_conn("geneva_bad_extra", {"conn_type": "lance", "host": str(c.root),
                                                  "extra": {"storage_options": "not json"}}),
                    hook_database("geneva_bad_extra")), IAE, r"geneva_bad_extra.*storage_options"),
    # -------------------------------------------------------------- spark-submit programs
    Case("cli-apply-no-arguments", lambda c: cli("apply"), CliFailure, r"--plan-uri"),
    Case("cli-apply-unknown-argument", lambda c: cli("apply", "--plan-uri", "x", "--result-file", "r", "--bogus"),
         CliFailure, r"--bogus"),
    Case("cli-compact-no-result", lambda c: cli("compact", "--plan-uri", c.plan_uri()), CliFailure,
         r"--result-file or --result-key"),
    Case("cli-apply-not-a-uri",
         lambda c: cli("apply", "--plan-uri", "not-a-uri", "--result-file", str(c.scratch / "r.json")), CliFailure,
         r"InvalidArgumentError.*not-a-uri"),
    Case("cli-write-commit-missing-plan",
         lambda c: cli("write_commit", "--plan-uri", c.plan_uri(), "--result-file", str(c.scratch / "r.json")),
         CliFailure, r"InvalidArgumentError: plan not found.*deadbeef"),
    Case("cli-apply-result-file-in-missing-dir",
         lambda c: cli("apply", "--plan-uri", c.plan_uri(), "--result-file", str(c.scratch / "no" / "r.json")),
         CliFailure, r"result-file.*no/r\.json"),
]


# ---------------------------------------------------------------------- running a case
class Lake:
    """The module's database, rebuilt when a case changed it."""

    def __init__(self, base: Path, spark: Any) -> None:
        self.base, self.spark, self.builds = base, spark, 0
        self.ctx: Ctx | None = None
        self.dirty = True

    def ready(self) -> Ctx:
        if self.dirty or self.ctx is None:
            self.builds += 1
            self.ctx = build_lake(self.base / f"lake-{self.builds}", self.spark)
            self.dirty = False
        return self.ctx


@dataclasses.dataclass
class Outcome:
    """What a case did: the error (None if it did not fail), whether Spark ran, what changed."""

    error: BaseException | None
    spark_ran: bool
    changed: list[str]


def run_case(case: Case, lake: Lake) -> Outcome:
    ctx = lake.ready()
    if case.setup is not None:
        case.setup(ctx)
    before, jobs = snapshot(ctx), spark_jobs(ctx.spark)
    error: BaseException | None = None
    try:
        case.call(ctx)
    except Exception as exc:  # noqa: BLE001 - judged by the caller
        error = exc
    after = snapshot(ctx)
    spark_ran = spark_jobs(ctx.spark) != jobs
    if isinstance(error, CliFailure):
        spark_ran = spark_ran or bool(SPARK_STARTED.search(error.output))
    if case.runtime or case.setup is not None or after != before:
        lake.dirty = True
    old, new = (committed_state(before), committed_state(after)) if case.runtime else (before, after)
    changed = [f"{k}: {old.get(k)!r:.300} -> {new.get(k)!r:.300}" for k in sorted(set(old) | set(new))
               if old.get(k) != new.get(k)]
    return Outcome(error, spark_ran, changed)


@pytest.fixture(scope="module")
def lake(tmp_path_factory, spark):
    saved = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW_CONN_GENEVA_")}
    yield Lake(tmp_path_factory.mktemp("bad-inputs"), spark)
    for key in [k for k in os.environ if k.startswith("AIRFLOW_CONN_GENEVA_")]:
        del os.environ[key]
    os.environ.update(saved)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_fails_clearly_and_changes_nothing(case: Case, lake: Lake) -> None:
    out = run_case(case, lake)
    exc = out.error
    assert exc is not None, f"{case.id}: the call succeeded; expected {case.error.__name__}"
    message = str(exc)
    assert isinstance(exc, case.error), (
        f"{case.id}: expected {case.error.__name__}, got {type(exc).__module__}.{type(exc).__name__}: {message:.500}")
    if case.error is not CliFailure:
        assert isinstance(exc, GenevaError)
    assert re.search(case.match, message, re.DOTALL), f"{case.id}: message does not name {case.match!r}: {message:.500}"
    assert not RUST_PATH.search(message), f"{case.id}: the message carries a Lance source path: {message:.500}"
    if not case.runtime:
        assert not out.spark_ran, f"{case.id}: failed only after Spark started"
    assert not out.changed, f"{case.id}: the failed call changed " + "; ".join(out.changed)


def test_a_uuid_version_just_works(db, spark):
    """Not bad input: a UDF whose version is a 32-character hex uuid is declared and computed like any other."""
    tbl = db.create_table("t", {"x": list(range(20))}, max_rows_per_file=5)
    fn = gp.udf(plain, data_type=pa.int64(), version=uuid.uuid4().hex)
    tbl.add_columns({"v": fn})
    result = tbl.backfill("v", spark=spark, progress=False)
    assert result.rows_computed == 20
    got = tbl.to_arrow(["x", "v"]).to_pydict()
    assert got["v"] == got["x"]
    assert tbl.udf_columns()["v"]["version"] == fn.version


def test_a_handle_on_a_dropped_table_raises_table_not_found(db, spark):
    """A Table (or a Query) that outlived ``drop_table`` names the table, not Lance's missing dataset path."""
    tbl = db.create_table("events", {"id": list(range(8)), "x": list(range(8))}, max_rows_per_file=2)
    tbl.add_columns({"y": double})
    query = tbl.search(None).select({"id": "id", "x": "x"})
    db.drop_table("events")
    calls = {
        "version": lambda: tbl.version,
        "count_rows": lambda: tbl.count_rows(),
        "add": lambda: tbl.add({"id": [8], "x": [8]}),
        "delete": lambda: tbl.delete("x > 1"),
        "drop_columns": lambda: tbl.drop_columns(["y"]),
        "dataset at a version": lambda: tbl.dataset(1),
        "backfill": lambda: tbl.backfill("y", spark=spark, progress=False),
        "backfill_async": lambda: tbl.backfill_async("y", spark=spark),
        "compact": lambda: tbl.compact(spark=spark),
        "cleanup_checkpoints": lambda: tbl.cleanup_checkpoints(),
        "get_errors": lambda: tbl.get_errors(),
        "create_materialized_view": lambda: db.create_materialized_view("v", query),
    }
    jobs = spark_jobs(spark)
    for what, call in calls.items():
        with pytest.raises(gp.TableNotFoundError, match=r"table 'events' not found") as info:
            call()
        assert not RUST_PATH.search(str(info.value)), what
    assert db.table_names() == [] and not os.listdir(db.uri), "a call on the dropped table wrote something"
    assert spark_jobs(spark) == jobs



"""The reference's (LanceDB Geneva's) public snippets that stopped here, run after the import swap only.

Each test is a snippet of the reference's documentation or API reference with ``import geneva`` made
``import geneva_provider as geneva`` (small data, and pip pins of what this machine has instead of models it
lacks), on real Lance tables and the in-process task runner (no JVM).  What needs Spark -- a UDF's
``num_cpus`` / ``memory`` on a local master, a manifest shipped to executors -- is in
``tests/spark/test_reference_snippets.py``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from importlib.metadata import version
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import geneva_provider as geneva
from geneva_provider.core.contracts.models import JobStatus
from geneva_provider.core.errors import JobCancelledError
from geneva_provider.stages import InProcessRunner

RUNNER = InProcessRunner()


class Chunk(NamedTuple):
    word: str


# ---------------------------------------------------------------------- float64 embeddings in float32 lists
def test_an_embedding_udf_returning_numpy_float64_rows_fills_a_float32_vector_column(db):
    """The reference's batched embedding UDF: a model's ``encode`` returns a (rows, dims) float64 numpy array."""

    class Model:
        def encode(self, texts: list[str]) -> np.ndarray:  # what sentence-transformers returns, in float64
            return np.array([[len(t), 0.5, 1 / 3] for t in texts], dtype=np.float64)

    @geneva.udf(data_type=pa.list_(pa.float32(), 3))
    class Embed:
        def __init__(self) -> None:
            self.model = None

        def setup(self) -> None:
            self.model = Model()

        def __call__(self, text: pa.Array) -> pa.Array:
            return self.model.encode(text.to_pylist())

    @geneva.udf(data_type=pa.list_(pa.float32(), 3))
    def embed_row(text: str) -> list[float]:
        return [np.float64(len(text)), np.float64(0.5), 1 / 3]  # numpy and Python float64 scalars

    @geneva.udf(data_type=pa.list_(pa.float32(), 3))
    def embed_arrow(text: pa.Array) -> pa.Array:
        return pa.array([[float(len(t)), 0.5, 1 / 3] for t in text.to_pylist()])  # inferred list<double>

    @geneva.udf(data_type=pa.list_(pa.float32(), 3))
    def embed_scalars(text: pa.Array) -> list:
        return [[pc.utf8_length(t).cast(pa.float64()), pa.scalar(0.5), pa.scalar(1 / 3)] for t in text]

    tbl = db.create_table("docs", pa.table({"text": ["a", "bb", "ccc"]}))
    tbl.add_columns({"e": Embed(), "r": embed_row, "a": embed_arrow, "s": embed_scalars})
    for column in ("e", "r", "a", "s"):
        tbl.backfill(column, spark=RUNNER)
    got = tbl.to_arrow(["text", "e", "r", "a", "s"])
    third = float(np.float32(1 / 3))
    for column in ("e", "r", "a", "s"):
        assert got.schema.field(column).type == pa.list_(pa.float32(), 3)
        values = got.column(column).to_pylist()
        assert values == [[1.0, 0.5, third], [2.0, 0.5, third], [3.0, 0.5, third]], column
    tbl.to_lance().validate()


def test_a_float64_value_a_float32_column_cannot_hold_is_refused_naming_udf_column_and_value(db):
    @geneva.udf(data_type=pa.list_(pa.float32(), 2))
    def huge(x: pa.Array) -> pa.Array:
        return np.array([[1.0, 1e40 if v == 2 else 2.0] for v in x.to_pylist()])

    @geneva.udf(data_type=pa.list_(pa.int32(), 2))
    def halves(x: int) -> list[float]:
        return [1.0, x / 2]  # 0.5 does not fit an int32 (pyarrow's safe cast refuses it)

    tbl = db.create_table("nums", pa.table({"x": [1, 2, 3]}))
    tbl.add_columns({"h": huge, "i": halves})
    version = tbl.version
    with pytest.raises(geneva.UDFExecutionError) as caught:
        tbl.backfill("h", spark=RUNNER)
    message = str(caught.value)
    assert "UDF 'huge'" in message and "column 'h'" in message and "1e+40" in message, message
    with pytest.raises(geneva.UDFExecutionError) as caught:
        tbl.backfill("i", spark=RUNNER)
    message = str(caught.value)
    assert "UDF 'halves'" in message and "column 'i'" in message and "0.5" in message, message
    assert tbl.version == version  # nothing written
    assert tbl.to_arrow(["h", "i"]).to_pydict() == {"h": [None] * 3, "i": [None] * 3}
    tbl.to_lance().validate()


def test_a_chunker_yielding_float64_or_arrow_values_fills_its_float32_embedding_column(db):
    @geneva.chunker(output_schema=pa.schema([("word", pa.string()), ("emb", pa.list_(pa.float32(), 2))]))
    def embedded_words(text: str) -> Iterator[dict]:
        for i, w in enumerate(text.split()):
            if i % 2:  # values read from an Arrow array: pyarrow double scalars
                yield {"word": w, "emb": list(pa.array([float(len(w)), 0.5]))}
            else:  # a model's numpy float64 row
                yield {"word": w, "emb": np.array([len(w), 0.5], dtype=np.float64)}

    docs = db.create_table("docs", pa.table({"id": [1, 2], "text": ["ab c def", "gh"]}))
    view = db.create_udtf_view("doc_words", docs.search(None).select(["id", "text"]), udtf=embedded_words)
    db.refresh("doc_words", spark=RUNNER)
    rows = sorted(view.to_arrow(["id", "word", "emb"]).to_pylist(), key=lambda r: (r["id"], r["word"]))
    assert rows == [{"id": 1, "word": "ab", "emb": [2.0, 0.5]}, {"id": 1, "word": "c", "emb": [1.0, 0.5]},
                    {"id": 1, "word": "def", "emb": [3.0, 0.5]}, {"id": 2, "word": "gh", "emb": [2.0, 0.5]}]
    assert view.schema.field("emb").type == pa.list_(pa.float32(), 2)


# ---------------------------------------------------------------------- create_table(primary_key=...)
def test_create_table_with_a_primary_key_records_it_for_upserts(db):
    tbl = db.create_table("users", [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}], primary_key="id")
    assert tbl.primary_key == ["id"]
    assert not tbl.schema.field("id").nullable
    assert db.open_table("users").primary_key == ["id"]  # kept in the table, for every reader
    tbl.add([{"id": 3, "name": "c"}])

    # Lance's merge_insert matches on the declared key when no ``on`` is given: an upsert.
    ds = tbl.to_lance()
    ds.merge_insert(None).when_matched_update_all().when_not_matched_insert_all().execute(
        pa.table({"id": [3, 4], "name": ["C", "d"]}, schema=ds.schema))
    assert sorted(tbl.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "C"}, {"id": 4, "name": "d"}]

    # A UDF column computed afterwards keeps the key.
    @geneva.udf
    def name_len(name: str) -> int:
        return len(name)

    tbl.add_columns({"n": name_len})
    tbl.backfill("n", spark=RUNNER)
    assert tbl.primary_key == ["id"] and tbl.to_arrow(["n"]).column("n").to_pylist() == [1, 1, 1, 1]

    compound = db.create_table("pairs", pa.table({"a": [1, 1], "b": ["x", "y"], "v": [0.5, 1.5]}),
                               primary_key=["a", "b"])
    assert compound.primary_key == ["a", "b"]
    assert db.create_table("pairs", schema=compound.schema, mode="exist_ok",
                           primary_key=["a", "b"]).primary_key == ["a", "b"]
    assert db.create_table("plain", [{"x": 1}]).primary_key == []


@pytest.mark.parametrize(("rows", "key", "message"), [
    ([{"id": 1}], "uid", "primary_key column 'uid' is not a column of the table"),
    ([{"id": 1}, {"id": None}], "id", "primary_key column 'id' holds 1 NULL value(s)"),
    ([{"id": 1}, {"id": 2}, {"id": 1}], "id", "primary_key ['id'] repeats: 1 key(s) name more than one row, e.g. "
                                              "{'id': 1} (2 rows)"),
    ([{"id": 1, "tags": ["a"]}], "tags", "primary_key column 'tags' is of type list<item: string>"),
    ([{"id": 1}], ["id", "id"], "primary_key names a column twice"),
    ([{"id": 1}], 7, "primary_key must be a column name or a list of column names, got 7"),
])
def test_a_bad_primary_key_is_refused_naming_it_and_creates_nothing(db, rows, key, message):
    with pytest.raises(geneva.InvalidArgumentError) as caught:
        db.create_table("users", rows, primary_key=key)
    assert "create_table 'users'" in str(caught.value) and message in str(caught.value)
    assert db.table_names() == []


def test_merge_insert_upserts_on_the_primary_key_and_the_next_backfill_computes_only_the_changed_rows(db, tmp_path):
    """LanceDB's upsert builder on a keyed table: ``on`` defaults to the declared primary key."""
    log = tmp_path / "calls.log"

    @geneva.udf
    def name_len(name: str) -> int:
        with open(log, "a") as f:
            f.write(name + "\n")
        return len(name)

    tbl = db.create_table("users", [{"id": i, "name": "x" * i} for i in range(1, 5)], primary_key="id")
    tbl.add_columns({"n": name_len})
    tbl.backfill("n", spark=RUNNER)
    log.unlink()

    result = (tbl.merge_insert().when_matched_update_all().when_not_matched_insert_all()
              .execute([{"id": 2, "name": "changed"}, {"id": 9, "name": "new"}]))
    assert (result.num_updated_rows, result.num_inserted_rows, result.num_deleted_rows) == (1, 1, 0)
    assert result.version == tbl.version
    rows = {r["id"]: (r["name"], r["n"]) for r in tbl.to_arrow(["id", "name", "n"]).to_pylist()}
    assert rows == {1: ("x", 1), 2: ("changed", 2), 3: ("xxx", 3), 4: ("xxxx", 4), 9: ("new", None)}
    tbl.backfill("n", spark=RUNNER)
    assert sorted(log.read_text().split()) == ["changed", "new"]  # the updated row (stale) and the new one
    assert {r["id"]: r["n"] for r in tbl.to_arrow(["id", "n"]).to_pylist()} == {1: 1, 2: 7, 3: 3, 4: 4, 9: 3}

    # Rows the data lacks deleted, on an explicit key too.
    gone = tbl.merge_insert(on="id").when_not_matched_by_source_delete("id > 3").execute(pa.table({"id": [1]}))
    assert gone.num_deleted_rows == 2 and sorted(tbl.to_arrow(["id"]).column("id").to_pylist()) == [1, 2, 3]
    tbl.to_lance().validate()


@pytest.mark.parametrize(("call", "message"), [
    (lambda t: t.merge_insert("nope"), "on names column(s) ['nope'] the table lacks"),
    (lambda t: t.merge_insert().execute([{"id": 1}]), "say what to do first"),
    (lambda t: t.merge_insert().when_not_matched_insert_all().execute([{"name": "a"}]),
     "the data lacks the key column(s) ['id']"),
    (lambda t: t.merge_insert().when_not_matched_insert_all().execute([{"id": 7, "age": 3}]),
     "column(s) ['age'] are not columns of the table"),
    (lambda t: t.merge_insert().when_not_matched_insert_all().execute([{"id": "seven"}]),
     "column 'id' holds string, which does not convert to the table's int64"),
    (lambda t: t.merge_insert().when_not_matched_insert_all().execute(pa.table({"id": pa.array([None], pa.int64())})),
     "key column 'id' holds NULL values"),
])
def test_a_bad_merge_insert_names_the_table_and_changes_nothing(db, call, message):
    tbl = db.create_table("users", [{"id": 1, "name": "a"}], primary_key="id")
    version = tbl.version
    with pytest.raises(geneva.InvalidArgumentError) as caught:
        call(tbl)
    assert "merge_insert into table 'users'" in str(caught.value) and message in str(caught.value)
    assert tbl.version == version and tbl.to_arrow().to_pylist() == [{"id": 1, "name": "a"}]
    plain = db.create_table("plain", [{"id": 1}])
    with pytest.raises(geneva.InvalidArgumentError, match=r"declares no primary key .*pass on="):
        plain.merge_insert()


def test_exist_ok_with_another_primary_key_is_refused(db):
    db.create_table("users", [{"id": 1, "email": "a"}], primary_key="id")
    with pytest.raises(geneva.InvalidArgumentError, match=r"existing table's primary key is \['id'\], not "
                                                           r"\['email'\]"):
        db.create_table("users", [{"id": 2, "email": "b"}], mode="exist_ok", primary_key="email")
    assert db.open_table("users").to_arrow().to_pylist() == [{"id": 1, "email": "a"}]


# ---------------------------------------------------------------------- GenevaManifest builders
def test_genevamanifest_create_pip_builds_the_manifest_a_udf_and_a_chunker_pin(db):
    """The reference's "Pinning a dependency manifest" snippet (its pins: packages this machine has)."""
    from geneva_provider import chunker, udf
    from geneva_provider.manifest import GenevaManifest

    embed_manifest = (
        GenevaManifest.create_pip("embedding-deps")
        .pip([f"pyarrow=={version('pyarrow')}", f"numpy=={version('numpy')}"])
        .build()
    )
    assert (embed_manifest.name, list(embed_manifest.pip)) == (
        "embedding-deps", [f"pyarrow=={version('pyarrow')}", f"numpy=={version('numpy')}"])

    @udf(data_type=pa.int64(), manifest=embed_manifest)
    def text_len(text: str) -> int:
        return len(text)

    @chunker(manifest=embed_manifest)
    def split_words(text: str) -> Iterator[Chunk]:
        for w in text.split():
            yield Chunk(w)

    assert text_len.manifest == embed_manifest and split_words.manifest == embed_manifest
    docs = db.create_table("docs", pa.table({"id": [1, 2], "text": ["a b", "c"]}))
    docs.add_columns({"n": text_len})
    docs.backfill("n", spark=RUNNER)
    view = db.create_udtf_view("words", docs.search(None).select(["id", "text"]), udtf=split_words)
    db.refresh("words", spark=RUNNER)
    assert docs.to_arrow(["n"]).column("n").to_pylist() == [3, 1]
    assert sorted(view.to_arrow(["id", "word"]).to_pylist(), key=lambda r: r["word"]) == [
        {"id": 1, "word": "a"}, {"id": 1, "word": "b"}, {"id": 2, "word": "c"}]


def test_the_manifest_builder_methods(tmp_path):
    from geneva_provider.manifest import GenevaManifest, PipManifestBuilder

    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\nnumpy==2.1.3\n\n--extra-index-url https://example.invalid\npandas==2.2.3  # x\n")
    m = (PipManifestBuilder.create("deps").version("v2").py_modules(["my_pkg"]).add_py_module("helpers.py")
         .requirements_path(str(requirements)).delete_local_zips(False).local_zip_output_dir(str(tmp_path))
         .allow_unpinned().build())
    assert (m.name, m.version, list(m.pip), list(m.py_modules)) == (
        "deps", "v2", ["numpy==2.1.3", "pandas==2.2.3"], ["my_pkg", "helpers.py"])
    assert (m.delete_local_zips, m.local_zip_output_dir, m.skip_site_packages) == (False, str(tmp_path), True)
    assert list(GenevaManifest.create_pip("one").add_pip("numpy==2.1.3").add_pip("pyarrow").build().pip) == [
        "numpy==2.1.3", "pyarrow"]
    site = GenevaManifest.create_site("mine").py_modules(["my_pkg"]).build()
    assert (site.name, list(site.py_modules), list(site.pip)) == ("mine", ["my_pkg"], [])
    # The same manifest as the constructor's: usable wherever a GenevaManifest is.
    assert GenevaManifest.create_pip("x").pip(["a==1"]).build() == GenevaManifest(name="x", pip=["a==1"])

    with pytest.raises(geneva.InvalidArgumentError, match="'both': give pip requirements or a requirements_path"):
        GenevaManifest.create_pip("both").pip(["a==1"]).requirements_path(str(requirements)).build()
    with pytest.raises(geneva.InvalidArgumentError, match=r"requirements_path .*missing\.txt' is not a file"):
        GenevaManifest.create_pip("x").requirements_path(str(tmp_path / "missing.txt"))
    with pytest.raises(geneva.InvalidArgumentError, match="GenevaManifest 'x': pip must be a list"):
        GenevaManifest.create_pip("x").pip("numpy")
    with pytest.raises(geneva.InvalidArgumentError, match=r"\.env_vars\(\) configures a Ray cluster; on Spark .*"
                                                           r"spark\.executorEnv\.NAME"):
        GenevaManifest.create_pip("x").add_env_var("TOKEN", "t")
    with pytest.raises(geneva.InvalidArgumentError, match=r"\.worker_image\(\).*spark\.kubernetes\.executor"):
        GenevaManifest.create_pip("x").worker_image("img:1")
    with pytest.raises(geneva.InvalidArgumentError, match="a name is required"):
        PipManifestBuilder().pip(["a"]).build()


def test_a_chunker_or_udtf_manifest_that_is_not_one_is_refused_at_decoration():
    with pytest.raises(geneva.UDFDefinitionError, match="chunker 'words': manifest must be a GenevaManifest"):
        @geneva.chunker(manifest={"pip": ["numpy"]})
        def words(text: str) -> Iterator[Chunk]:
            yield Chunk(text)

    with pytest.raises(geneva.UDFDefinitionError, match="UDTF 'counts': manifest must be a GenevaManifest"):
        @geneva.udtf(output_schema=pa.schema([("n", pa.int64())]), manifest="deps")
        def counts(source) -> Iterator[pa.RecordBatch]:
            yield pa.RecordBatch.from_pylist([{"n": 1}])


# ---------------------------------------------------------------------- conn.is_remote(), stable row ids
def test_is_remote_is_false_for_a_directory_or_object_store_connection(tmp_path):
    conn = geneva.connect(tmp_path / "db")
    assert conn.is_remote() is False
    assert geneva.connect("s3://bucket/lake", storage_options={"region": "us-east-1"}).is_remote() is False
    rest = geneva.connect("http://127.0.0.1:1", namespace_impl="rest", namespace_properties={"uri": "http://127.0.0.1:1"})
    assert rest.is_remote() is True


def test_dataset_uses_stable_row_ids_from_geneva_provider_db(db):
    from geneva_provider.db import dataset_uses_stable_row_ids

    stable = db.create_table("stable", [{"x": 1}])
    plain = db.create_table("plain", [{"x": 1}], stable_row_ids=False)
    assert dataset_uses_stable_row_ids(stable.to_lance()) is True
    assert dataset_uses_stable_row_ids(plain.to_lance()) is False
    assert dataset_uses_stable_row_ids(stable) is True


# ---------------------------------------------------------------------- batch_checkpoint_flush_interval_seconds
def _sizes_logged(db, tmp_path, name: str, **options) -> list[int]:
    """The rows of each call of a batched UDF over 400 rows (one task), computed at 0.5 ms a row."""
    log = tmp_path / f"{name}.log"

    @geneva.udf(data_type=pa.int64())
    def double(x: pa.Array) -> pa.Array:
        with open(log, "a") as f:
            f.write(f"{len(x)}\n")
        time.sleep(0.0005 * len(x))
        return pc.multiply(x, 2)

    tbl = db.create_table(name, pa.table({"x": list(range(400))}))
    tbl.add_columns({"y": double})
    tbl.backfill("y", spark=RUNNER, min_checkpoint_size=10, max_checkpoint_size=1000, task_size=400, **options)
    assert tbl.count_rows("y = x * 2") == 400
    return [int(n) for n in log.read_text().split()]


def test_batch_checkpoint_flush_interval_seconds_sets_the_work_each_checkpoint_holds(db, tmp_path):
    every = _sizes_logged(db, tmp_path, "zero", batch_checkpoint_flush_interval_seconds=0)
    assert every == [10] * 40  # no buffering: every min_checkpoint_size rows checkpointed at once
    short = _sizes_logged(db, tmp_path, "short", batch_checkpoint_flush_interval_seconds=0.1)
    long = _sizes_logged(db, tmp_path, "long", batch_checkpoint_flush_interval_seconds=60)
    assert sum(short) == sum(long) == 400
    assert len(long) <= len(short) <= len(every) and len(long) < len(every)  # longer interval: larger checkpoints
    assert long[:3] == [10, 80, 310]  # the probe, then x8 growth capped by the rows left: the default's sizing
    assert max(short) <= 200  # at most ~0.1 s of work each: 0.5 ms a row and the checkpoint's own costs


@pytest.mark.parametrize("value", [-1, float("nan"), "soon"])
def test_a_bad_flush_interval_is_refused_naming_the_option(db, value):
    tbl = db.create_table("t", pa.table({"x": [1]}))

    @geneva.udf
    def one(x: int) -> int:
        return 1

    tbl.add_columns({"y": one})
    with pytest.raises(geneva.InvalidArgumentError, match="batch_checkpoint_flush_interval_seconds must be"):
        tbl.backfill("y", spark=RUNNER, batch_checkpoint_flush_interval_seconds=value)
    assert db.list_jobs() == []


def test_the_flush_interval_is_a_field_of_the_lance_namespace_backfill_request():
    """The Lance Namespace's backfill request carries it; the same name is a backfill option here."""
    from lance_namespace_urllib3_client.models.alter_table_backfill_columns_request import (
        AlterTableBackfillColumnsRequest,
    )

    from geneva_provider.core.contracts.options import BackfillOptions

    request = AlterTableBackfillColumnsRequest(column="y", batch_checkpoint_flush_interval_seconds=2.5)
    shared = set(AlterTableBackfillColumnsRequest.model_fields) & set(BackfillOptions.names())
    assert "batch_checkpoint_flush_interval_seconds" in shared
    options = BackfillOptions.parse({k: getattr(request, k) for k in shared if getattr(request, k) is not None})
    assert options.batch_checkpoint_flush_interval_seconds == 2.5


# ---------------------------------------------------------------------- list_jobs(status="CANCELLED")
def test_a_cancelled_job_is_listed_cancelled_not_failed(db, tmp_path):
    slow_flag = tmp_path / "slow"
    slow_flag.touch()

    @geneva.udf(data_type=pa.int64())
    def slow(x: int) -> int:
        if os.path.exists(slow_flag):
            time.sleep(0.02)
        return x

    tbl = db.create_table("t", pa.table({"x": list(range(2_000))}))
    tbl.add_columns({"y": slow})
    handle = tbl.backfill_async("y", spark=InProcessRunner(), checkpoint_size=20, task_size=100)
    deadline = time.monotonic() + 60
    while not [r for r in db.list_jobs("t", status="RUNNING") if r.rows_checkpointed] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)
    slow_flag.unlink()

    cancelled = db.list_jobs(status="CANCELLED")  # the reference's status
    assert [j.job_id for j in cancelled] == [handle.job_id]
    assert cancelled[0].status is JobStatus.CANCELLED and cancelled[0].completed_at is not None
    assert db.list_jobs(status="FAILED") == []
    # Any case, as the CLI's --status takes it, and the enum member itself.
    assert [j.job_id for j in db.list_jobs(status="cancelled")] == [j.job_id for j in db.list_jobs(
        status=JobStatus.CANCELLED)] == [handle.job_id]
    assert handle.status().status is JobStatus.CANCELLED
    assert tbl.to_arrow(["y"]).column("y").null_count == 2_000  # nothing of it landed

    # A job that fails is still FAILED.
    @geneva.udf(data_type=pa.int64())
    def broken(x: int) -> int:
        raise ValueError("no")

    tbl.add_columns({"z": broken})
    with pytest.raises(geneva.UDFExecutionError):
        tbl.backfill("z", spark=InProcessRunner())
    assert [j.column for j in db.list_jobs(status="FAILED")] == ["z"]
    assert [j.job_id for j in db.list_jobs(status="CANCELLED")] == [handle.job_id]

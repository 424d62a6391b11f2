"""A backfill found up to date is planned again without opening its table while the table has not changed
(``operations/unchanged.py``, ``core/table_state.py``) -- and never once it has: an append, a new UDF version,
another ``where``, a table dropped and created again.  Real Lance tables, the in-process runner (no JVM)."""

from __future__ import annotations

import json
import subprocess
import sys

import lance
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.contracts.models import JobStatus
from geneva_provider.core.contracts.operations import BackfillColumn
from geneva_provider.core.store.checkpoint import LanceCheckpointStore
from geneva_provider.core.store.layout import JobStore, UpToDateKey, parse_key
from geneva_provider.core.table_state import local_table_state, manifest_version
from geneva_provider.operations import plan, run
from geneva_provider.pipeline.stages.job_records import find_record
from geneva_provider.stages import InProcessRunner
from tests.helpers import counting_double, events_table, read_calls


@gp.udf(data_type=pa.int64())
def triple(x: int) -> int:
    return 3 * x


def test_the_newest_manifest_names_the_version_and_every_commit_changes_the_state(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(pa.table({"x": [1, 2]}), uri)
    first = local_table_state(uri)
    assert first is not None and first.version == ds.version == 1
    assert local_table_state(f"file://{uri}") == first
    ds = lance.write_dataset(pa.table({"x": [3]}), uri, mode="append")
    second = local_table_state(uri)
    assert second is not None and second.version == ds.version == 2 and second != first
    assert local_table_state(uri) == second  # reading it changes nothing
    assert local_table_state("s3://bucket/t.lance") is None  # an object store: opened as usual
    assert local_table_state(str(tmp_path / "missing.lance")) is None


@pytest.mark.parametrize(("name", "version"), [
    ("12.manifest", 12),                                   # the V1 naming scheme
    (f"{2**64 - 1 - 7:020d}.manifest", 7),                 # V2: zero-padded u64::MAX - version
    ("d3.manifest", None), ("latest_version_hint.json", None), (".tmp-1.manifest", None), ("manifest", None),
])
def test_manifest_file_names_are_read_as_the_table_format_names_them(name, version):
    assert manifest_version(name) == version


def _plan(db, store, **fields):
    return plan(db, BackfillColumn(id=["events"], column="y", **fields), checkpoint_store=store)


def test_an_up_to_date_backfill_is_planned_again_from_its_record_until_the_table_changes(db, call_dir, tmp_path):
    store = LanceCheckpointStore(str(tmp_path / "checkpoints"))
    tbl = db.create_table("events", events_table(300), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    run(db, BackfillColumn(id=["events"], column="y"), spark=InProcessRunner(parallelism=2), checkpoint_store=store)
    assert sorted(read_calls(call_dir)) == list(range(300))

    first = _plan(db, store)  # planned from the table: up to date, and recorded so
    assert first.nothing_to_do
    [key] = [k for k in store.list_keys("") if isinstance(parse_key(k), UpToDateKey)]
    again = _plan(db, store)  # from the record: a new job, the same no-op plan
    assert again.nothing_to_do and again.job_id != first.job_id
    assert (again.read_version, again.rows_reused, again.fragments_reused) == (
        first.read_version, first.rows_reused, first.fragments_reused)
    assert JobStore(store).plan_text(again.job_id)  # its plan is stored: every stage after it takes its id
    assert find_record(store, again.job_id).status == JobStatus.DONE  # what describe_job shows

    tbl.add(events_table(50, start=300))  # the table changes: planned from the table again
    grown = _plan(db, store)
    assert not grown.nothing_to_do and grown.rows_to_compute == 50
    run(db, BackfillColumn(id=["events"], column="y"), spark=InProcessRunner(parallelism=2), checkpoint_store=store)
    assert _plan(db, store).nothing_to_do and _plan(db, store).nothing_to_do
    assert sorted(read_calls(call_dir)) == list(range(350))  # each row computed once

    filtered = _plan(db, store, where="x < 10")  # another request: its own record
    assert filtered.nothing_to_do and _plan(db, store, where="x < 10").nothing_to_do
    assert len([k for k in store.list_keys("") if isinstance(parse_key(k), UpToDateKey)]) == 2
    assert key in store.list_keys("")

    tbl.alter_columns({"path": "y", "udf": triple})  # a new UDF: every value stale
    assert _plan(db, store).rows_to_compute == 350
    tbl.dataset().validate()


def test_a_table_dropped_and_created_again_is_planned_from_the_table_even_at_the_same_version(db, call_dir,
                                                                                               tmp_path):
    store = LanceCheckpointStore(str(tmp_path / "checkpoints"))  # outlives the table: the record would too
    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"y": counting_double(call_dir)})
    run(db, BackfillColumn(id=["events"], column="y"), spark=InProcessRunner(parallelism=2), checkpoint_store=store)
    done = _plan(db, store)
    assert done.nothing_to_do
    db.drop_table("events")
    tbl = db.create_table("events", events_table(100))
    tbl.add_columns({"y": counting_double(call_dir)})
    while tbl.dataset().version < done.read_version:  # the same version number, another table
        tbl.add(events_table(0))
    assert tbl.dataset().version == done.read_version
    again = _plan(db, store)
    assert not again.nothing_to_do and again.rows_to_compute == 100


def test_planning_an_unchanged_table_imports_neither_pylance_nor_pandas(db, call_dir, tmp_path):
    tbl = db.create_table("events", events_table(200), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    run(db, BackfillColumn(id=["events"], column="y"), spark=InProcessRunner(parallelism=2))
    assert plan(db, BackfillColumn(id=["events"], column="y")).nothing_to_do  # recorded
    script = (
        "import json, sys\n"
        "from geneva_provider.core.catalog import Catalog\n"
        "from geneva_provider.core.contracts.operations import BackfillColumn\n"
        "from geneva_provider.operations import plan\n"
        f"s = plan(Catalog({str(tmp_path / 'db')!r}), BackfillColumn(id=['events'], column='y'))\n"
        "print(json.dumps([s.nothing_to_do, sorted(m for m in ('lance', 'pandas') if m in sys.modules)]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, []]


def test_a_dry_plan_with_work_stores_nothing_and_starts_no_job(db, call_dir):
    from geneva_provider.operations.dispatch import prepare

    tbl = db.create_table("events", events_table(300), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    store = tbl.checkpoint_store
    before = sorted(store.list_keys(""))
    job = prepare(BackfillColumn(id=["events"], column="y", where="x >= 100"), db.catalog)
    assert job.dry_plan is not None
    summary = job.dry_plan()
    assert (summary.rows_to_compute, summary.nothing_to_do) == (200, False)
    assert sorted(store.list_keys("")) == before and db.list_jobs() == []  # no plan, no record, nothing computed
    assert read_calls(call_dir) == [] and set(tbl.to_arrow(["y"]).column("y").to_pylist()) == {None}


def test_a_verified_job_records_its_table_up_to_date_unless_rows_arrived_meanwhile(db, call_dir):
    from geneva_provider.core.store.layout import OriginKey
    from geneva_provider.operations import confirm
    from geneva_provider.stages import run_apply, run_write_commit, verify

    tbl = db.create_table("events", events_table(300), max_rows_per_file=100)
    tbl.add_columns({"y": counting_double(call_dir)})
    store = tbl.checkpoint_store

    def stages(summary):
        runner = InProcessRunner(parallelism=2)
        run_apply(summary.plan_uri, runner)
        run_write_commit(summary.plan_uri, runner)
        verify(summary)

    first = plan(db, BackfillColumn(id=["events"], column="y"))  # what an Airflow plan task does
    assert OriginKey(first.job_id).key() in store.list_keys("plan-")
    stages(first)
    assert confirm(db, store, first.job_id)  # the verify task's question: up to date, recorded
    known = [k for k in store.list_keys("") if isinstance(parse_key(k), UpToDateKey)]
    assert len(known) == 1
    again = plan(db, BackfillColumn(id=["events"], column="y"))  # the next run: from the record
    assert again.nothing_to_do and JobStore(store).plan_text(again.job_id)

    tbl.add(events_table(20, start=300))
    second = plan(db, BackfillColumn(id=["events"], column="y"))
    assert second.rows_to_compute == 20
    stages(second)
    tbl.add(events_table(5, start=320))  # rows arrive between the job's end and its verify task's question
    jobs_before = {j.job_id for j in db.list_jobs()}
    assert not confirm(db, store, second.job_id)  # not up to date: nothing recorded, no job started
    assert {j.job_id for j in db.list_jobs()} == jobs_before
    assert plan(db, BackfillColumn(id=["events"], column="y")).rows_to_compute == 5
    assert sorted(read_calls(call_dir)) == list(range(320))
    assert not confirm(db, store, "20990101T000000-00000000")  # no such job: nothing to say
    tbl.dataset().validate()

"""A chunker view's refresh writes each row once: apply writes the rows as fragments, write+commit only commits them.

Apply writes a checkpoint's rows as new fragments of the view, not committed, and records them in the
checkpoint; write+commit commits those very files with no Spark job.  Only a checkpoint whose parents
its part does not all take -- a plan of the same refresh cut the parts otherwise -- has its rows copied,
and then only the rows of the parents the part takes: the view still holds each parent's rows once.
The parents' fingerprints keep the values views already store.
"""

from __future__ import annotations

from pathlib import Path

import geneva_provider as gp
from geneva_provider import stages
from geneva_provider.core.store.layout import JobStore
from tests.helpers import clear_calls, counting_split, read_calls
from tests.spark.test_udtf_views import _spark_jobs, docs_table, expected_rows, view_rows


def data_files(view: gp.Table) -> set[str]:
    return {p.name for p in Path(view.uri, "data").iterdir()}


def committed_files(view: gp.Table) -> set[str]:
    return {f.path for frag in view.dataset().get_fragments() for f in frag.data_files()}


def chunk_view(db, tmp_path, n: int) -> tuple[gp.Table, gp.Table]:
    """``n`` documents and their chunker view, not refreshed; the chunker logs its calls under ``tmp_path``."""
    docs = db.create_table("docs", docs_table(range(n)), stable_row_ids=True)
    return docs, db.create_udtf_view("chunks", source=docs.search(None).select(["doc_id", "text"]),
                                     udtf=counting_split(str(tmp_path)))


def test_write_commit_commits_the_files_apply_wrote_and_starts_no_spark_job(db, spark, tmp_path):
    docs, view = chunk_view(db, tmp_path, 600)
    summary = stages.plan_refresh(view.ref, {"checkpoint_size": 100})
    stages.run_apply(summary.plan_uri, spark)
    written = data_files(view) - committed_files(view)
    assert written  # the rows are in the view's data directory already, not yet in any of its versions
    jobs = _spark_jobs(spark)

    result = stages.run_write_commit(summary.plan_uri, spark)

    assert _spark_jobs(spark) == jobs
    assert data_files(view) - committed_files(view) == set()  # no file written again, none left behind
    assert committed_files(view) == written
    assert result.rows_committed == len(expected_rows(docs)) == view.count_rows()
    assert view_rows(view) == expected_rows(docs)
    view.dataset().validate()


def test_a_plan_cut_otherwise_takes_the_checkpoints_rows_once_and_calls_nothing_again(db, spark, tmp_path):
    docs, view = chunk_view(db, tmp_path, 1_000)
    first = stages.plan_refresh(view.ref, {"checkpoint_size": 70})
    stages.run_apply(first.plan_uri, spark)
    held = JobStore(view.checkpoint_store).batches("")
    # The same refresh planned again (its checkpoints are named by the source version, not by the plan)
    # with parts of 100 parents: a checkpoint of 70 lies in one part or straddles two.
    again = stages.plan_refresh(view.ref, {"checkpoint_size": 100})
    clear_calls(tmp_path)
    assert stages.run_apply(again.plan_uri, spark).rows_computed == 0
    assert read_calls(tmp_path) == [] and JobStore(view.checkpoint_store).batches("") == held
    before = data_files(view)

    stages.run_write_commit(again.plan_uri, spark)

    assert view_rows(view) == expected_rows(docs)  # each parent's rows once
    copied = committed_files(view) - before
    assert copied and committed_files(view) & before  # straddling checkpoints' rows copied, others' files committed
    assert view.check(fingerprints=True).exact
    view.dataset().validate()


"""A small plan's Spark stages run in the task's process (``in_process_rows``): no Spark Connect session, no job.

Issue 44: over Spark Connect, an incremental run of a few thousand rows spent seconds opening a session,
uploading the package, probing the workers and starting a Python worker daemon -- more than the work.  A
plan with at most ``in_process_rows`` rows to compute now runs its apply and write+commit with the
in-process task runner; a larger one still goes to the server.  Checked against the session's real
Spark Connect server: which sessions its log shows, the values written, the table's validity.
"""

from __future__ import annotations

import re

import pytest

from tests.airflow.test_example_dags import run, words_of
from tests.conftest import FAKE_SECRET
from tests.helpers import dag_bag


def _log_end(server) -> int:
    """Where the Connect server's log ends now."""
    return len(server.log_path.read_text(errors="replace"))


def _sessions(server, since: int = 0) -> set[str]:
    """The ids of the sessions the Connect server's log shows a client using after offset ``since`` (a job resumes
    the worker's warm session, which an earlier test may have opened: what counts is that it was used)."""
    return set(re.findall(r"sessionId: ([0-9a-f-]{36}) accessed",
                          server.log_path.read_text(errors="replace")[since:]))


DAGS = """
from datetime import datetime

from airflow.sdk import DAG

from geneva_provider.task_groups import backfill_task_group

for rows in (0, 5_000):
    with DAG(dag_id=f"small_plans_{rows}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        backfill_task_group("backfill_words", "events", "words", retries=0, refresh_indexes=False,
                            in_process_rows=rows)
"""


@pytest.fixture(scope="module")
def small_plan_dags(airflow_db):
    with dag_bag("geneva_test_small_plans.py", DAGS) as bag:
        yield bag


@pytest.mark.slow
def test_a_small_plan_runs_in_the_task_and_a_large_one_over_connect(small_plan_dags, lance_db, connect_server, capfd):
    from geneva_provider.examples import sample, word_count

    tbl = lance_db.create_table("events", sample(6_000), max_rows_per_file=3_000)
    tbl.add_columns({"words": word_count})
    dag = small_plan_dags.get_dag("small_plans_5000")

    before = _log_end(connect_server)
    dr, states, tis, _ = run(dag)  # 6,000 rows to compute: more than 5,000, over Spark Connect
    assert dr.state == "success", states
    assert tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")["rows_computed"] == 6_000
    over_connect = _sessions(connect_server, before)
    assert len(over_connect) == 1  # the job's one session, apply's and write+commit's
    out, err = capfd.readouterr()
    assert "in the task's process" not in out + err

    tbl.add(sample(4_000, start=6_000))  # the incremental run: 4,000 rows, at most 5,000
    before = _log_end(connect_server)
    dr, states, tis, _ = run(dag)
    assert dr.state == "success", states
    applied = tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")
    assert applied["rows_computed"] == 4_000 and applied["rows_reused"] == 6_000
    assert states["backfill_words.write_commit"] == "success" and states["backfill_words.verify"] == "success"
    assert _sessions(connect_server, before) == set()  # no session: nothing reached the server
    out, err = capfd.readouterr()
    assert out.count("in the task's process (4,000 rows to compute, at most 5,000") + \
        err.count("in the task's process (4,000 rows to compute, at most 5,000") == 2  # apply, write+commit
    assert FAKE_SECRET not in out + err

    got = lance_db.open_table("events").to_arrow(["id", "text", "words"]).sort_by("id").to_pydict()
    assert got["id"] == list(range(10_000))
    assert got["words"] == [words_of(t) for t in got["text"]]
    lance_db.open_table("events").dataset().validate()


@pytest.mark.slow
def test_in_process_rows_zero_keeps_a_small_plan_on_spark(small_plan_dags, lance_db, connect_server):
    from geneva_provider.examples import sample, word_count

    lance_db.create_table("events", sample(500), max_rows_per_file=250).add_columns({"words": word_count})
    before = _log_end(connect_server)
    dr, states, tis, _ = run(small_plan_dags.get_dag("small_plans_0"))
    assert dr.state == "success", states
    assert tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")["rows_computed"] == 500
    assert len(_sessions(connect_server, before)) == 1
    got = lance_db.open_table("events").to_arrow(["text", "words"]).to_pydict()
    assert got["words"] == [words_of(t) for t in got["text"]]


@pytest.mark.slow
def test_over_spark_submit_a_small_write_runs_in_the_task_after_a_larger_apply_in_its_jvm(small_plan_dags, lance_db,
                                                                                          spark_submit, capfd):
    """6,000 rows to compute, more than in_process_rows (5,000): apply is submitted (a JVM); its 6,000 int32 values
    and fingerprints are a few KiB of column files, which write+commit writes and commits in the task's process
    without starting a second JVM."""
    from geneva_provider.examples import sample, word_count

    tbl = lance_db.create_table("events", sample(6_000), max_rows_per_file=3_000)
    tbl.add_columns({"words": word_count})
    dr, states, tis, _ = run(small_plan_dags.get_dag("small_plans_5000"))
    assert dr.state == "success", states
    assert tis["backfill_words.apply"].xcom_pull(task_ids="backfill_words.apply")["rows_computed"] == 6_000
    out, err = capfd.readouterr()
    logs = out + err
    assert "Submitting the apply stage" in logs and "Submitting the write_commit stage" not in logs
    assert "in the task's process (6,000 rows (~" in logs and "no spark-submit" in logs
    assert FAKE_SECRET not in logs
    got = lance_db.open_table("events").to_arrow(["id", "text", "words"]).sort_by("id").to_pydict()
    assert got["id"] == list(range(6_000)) and got["words"] == [words_of(t) for t in got["text"]]
    lance_db.open_table("events").dataset().validate()

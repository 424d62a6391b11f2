"""``geneva-provider`` and ``Table.status()`` on real Lance tables and a real job store (no JVM: jobs run on the
in-process task runner).

The CLI's ``main(argv)`` runs in this process; one test runs it as ``python -m geneva_provider.cli``, as the console
script does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.cli import main
from geneva_provider.core.errors import JobCancelledError, UDFExecutionError

# Imported with the module: Airflow sets its logging up (a root handler on stderr) before any test captures stderr.
from geneva_provider.plugin import job_record
from geneva_provider.stages import InProcessRunner
from tests.helpers import events_table

ROOT = Path(__file__).resolve().parents[2]


@gp.udf(data_type=pa.int64(), name="cli_double")
def cli_double(x: int) -> int:
    return x * 2


@gp.udf(data_type=pa.int64(), name="cli_fails_at_3")
def cli_fails_at_3(x: int) -> int:
    if x == 3:
        raise ValueError("x is 3, which this UDF refuses")
    return x * 2


@gp.udf(data_type=pa.int64(), name="cli_slow_double")
def cli_slow_double(x: int) -> int:
    time.sleep(0.02)
    return x * 2


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_jobs_list_and_show_a_finished_and_a_failed_job(db, capsys):
    runner = InProcessRunner()
    good = db.create_table("good", events_table(20))
    good.add_columns({"y": cli_double})
    done = good.backfill("y", spark=runner)
    bad = db.create_table("bad", events_table(20))
    bad.add_columns({"y": cli_fails_at_3})
    with pytest.raises(UDFExecutionError, match="x is 3"):
        bad.backfill("y", spark=runner)
    failed = db.list_jobs("bad")[0]

    code, out, err = run(capsys, "--db", db.uri, "jobs", "list")
    assert code == 0 and not err
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["job_id", "kind", "table", "column", "status", "stage"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows[done.job_id][1:5] == ["backfill", "good", "y", "DONE"]
    assert rows[failed.job_id][1:5] == ["backfill", "bad", "y", "FAILED"]

    code, out, _ = run(capsys, "--db", db.uri, "--json", "jobs", "list", "--status", "failed")
    assert code == 0 and [j["job_id"] for j in json.loads(out)] == [failed.job_id]
    code, out, _ = run(capsys, "--db", db.uri, "--json", "jobs", "list", "--table", "good")
    assert code == 0 and [(j["job_id"], j["rows_committed"]) for j in json.loads(out)] == [(done.job_id, 20)]

    code, out, _ = run(capsys, "--db", db.uri, "jobs", "show", failed.job_id)
    assert code == 0
    assert re.search(r"^status +FAILED$", out, re.M)
    assert re.search(r"^error +.*x is 3, which this UDF refuses", out, re.M)
    assert "first 1 failed rows" in out and "ValueError: x is 3" in out
    code, out, _ = run(capsys, "--db", db.uri, "--json", "jobs", "show", failed.job_id)
    shown = json.loads(out)
    assert shown["job"]["status"] == "FAILED" and shown["job"]["table"] == "bad"
    assert [(e["column"], e["error_type"], e["outcome"]) for e in shown["errors"]] == [("y", "ValueError", "failed")]
    code, out, _ = run(capsys, "--db", db.uri, "--json", "jobs", "show", done.job_id)
    assert json.loads(out)["job"]["rows_committed"] == 20 and json.loads(out)["errors"] == []


def test_bad_input_is_one_line_on_stderr_with_exit_code_2(db, capsys):
    db.create_table("t", events_table(3))
    for argv, culprit in [(["jobs", "show", "20260101T000000-deadbeef"], "20260101T000000-deadbeef"),
                          (["table", "status", "nope"], "nope"),
                          (["jobs", "list", "--status", "SLEEPING"], "SLEEPING"),
                          (["jobs", "list", "--table", "nope"], "nope")]:
        code, out, err = run(capsys, "--db", db.uri, *argv)
        assert (code, out) == (2, ""), argv
        assert err.count("\n") == 1 and err.startswith("geneva-provider: ") and culprit in err, err
    with pytest.raises(SystemExit) as usage:  # argparse: no database given
        main(["jobs", "list"])
    assert usage.value.code == 2


def test_cancel_a_running_backfill_from_the_command_line(db, capsys):
    tbl = db.create_table("slow", events_table(2_000))
    tbl.add_columns({"y": cli_slow_double})  # 40 s of work: cancelled long before it ends
    raised: list[BaseException] = []

    def backfill() -> None:
        try:
            tbl.backfill("y", spark=InProcessRunner(), checkpoint_size=50, task_size=50)
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)

    thread = threading.Thread(target=backfill)
    started = time.monotonic()
    thread.start()
    deadline = started + 30
    running = []
    while not running and time.monotonic() < deadline:
        running = [r for r in db.list_jobs("slow", status="RUNNING") if r.rows_checkpointed]
        time.sleep(0.05)
    assert running, "the backfill never started computing"
    code, out, err = run(capsys, "--db", db.uri, "jobs", "cancel", running[0].job_id, "--wait", "--timeout", "30")
    thread.join(30)
    assert code == 0 and not err, err
    assert f"job {running[0].job_id}: cancel requested; it ended CANCELLED (cancelled)" in out
    assert len(raised) == 1 and isinstance(raised[0], JobCancelledError)
    assert time.monotonic() - started < 30
    record = db.get_job(running[0].job_id)
    assert (record.status, record.error, record.rows_committed) == ("CANCELLED", "cancelled", 0)
    assert [r.job_id for r in db.list_jobs("slow", status="CANCELLED")] == [running[0].job_id]  # the reference's
    assert not db.list_jobs("slow", status="FAILED")
    code, out, err = run(capsys, "--db", db.uri, "jobs", "list", "--status", "cancelled")
    assert code == 0 and running[0].job_id in out and "CANCELLED" in out, (out, err)
    assert tbl.to_arrow(["y"]).column("y").null_count == 2_000  # nothing of it landed
    # A job that ended cannot be cancelled: bad input, changing nothing.
    code, out, err = run(capsys, "--db", db.uri, "jobs", "cancel", running[0].job_id)
    assert code == 2 and "is CANCELLED, not running: nothing to cancel" in err


def test_every_job_id_the_package_shows_is_found_by_jobs_show(db, capsys, caplog, monkeypatch):
    """A backfill, refresh or compaction with nothing to do still has an id -- in its result, its handle, its log line
    and an Airflow plan's XCom -- and ``jobs show`` / ``db.get_job`` find it: a DONE record with nothing planned."""
    import logging

    runner = InProcessRunner()
    tbl = db.create_table("t", events_table(20))
    tbl.add_columns({"y": cli_double})
    done = tbl.backfill("y", spark=runner)
    view = db.create_materialized_view("v", tbl.search(None).select({"x": "x"}))
    view.refresh(spark=runner)
    caplog.set_level(logging.INFO, logger="geneva_provider")
    shown = {
        "backfill": tbl.backfill("y", spark=runner).job_id,
        "handle": (handle := tbl.backfill_async("y", spark=runner)).result().job_id,
        "refresh": view.refresh(spark=runner).job_id,
        "compaction": tbl.compact(spark=runner).job_id,
    }
    assert handle.job_id == shown["handle"]
    logged = re.findall(r"job (\S+) on table 't': up to date", caplog.text)
    assert shown["backfill"] in logged, caplog.text
    assert len(set(shown.values()) | {done.job_id}) == 5
    for what, job_id in shown.items():
        code, out, err = run(capsys, "--db", db.uri, "--json", "jobs", "show", job_id)
        assert (code, err) == (0, ""), (what, err)
        record = json.loads(out)["job"]
        assert (record["job_id"], record["status"], record["stage"], record["rows_planned"]) == (
            job_id, "DONE", "done", 0), (what, record)
        assert record["table"] == ("v" if what == "refresh" else "t"), (what, record)
        assert db.get_job(job_id).status == "DONE"
        code, out, err = run(capsys, "--db", db.uri, "jobs", "cancel", job_id)  # nothing runs: bad input
        assert code == 2 and "is DONE, not running: nothing to cancel" in err, (what, err)
    assert db.get_job(shown["backfill"]).column == "y"
    # The job link an Airflow plan task shows (a plan with nothing to do has one too) opens its record.
    monkeypatch.setenv("AIRFLOW_CONN_CLI_LAKE", json.dumps({"conn_type": "lance", "host": db.uri}))
    assert job_record(shown["backfill"], "t", "cli_lake")["status"] == "DONE"
    # The history lists the jobs that did work; an id that was never shown is still not found.
    assert [r.job_id for r in db.list_jobs("t", kind="backfill")] == [done.job_id]
    code, _, err = run(capsys, "--db", db.uri, "jobs", "show", "20260101T000000-deadbeef")
    assert code == 2 and "20260101T000000-deadbeef" in err


def test_table_status_counts_the_rows_whose_inputs_were_updated_as_stale(db, capsys):
    tbl = db.create_table("t", events_table(100), max_rows_per_file=40)
    tbl.add_columns({"y": cli_double})
    assert tbl.status().columns[0].model_dump() == {"column": "y", "rows_valid": 0, "rows_stale": 0,
                                                    "rows_missing": 100, "expression": None}
    tbl.backfill("y", spark=InProcessRunner())
    tbl.dataset().update({"x": "x + 1000"}, where="x >= 35 AND x < 45")  # 10 rows, over two fragments
    tbl.add(events_table(5, start=100))

    state = tbl.status().columns[0]
    assert (state.rows_valid, state.rows_stale, state.rows_missing) == (90, 10, 5)
    code, out, _ = run(capsys, "--db", db.uri, "table", "status", "t")
    assert code == 0
    assert out.splitlines()[0] == f"table t: version {tbl.version}, 105 rows"
    assert out.splitlines()[-1].split() == ["y", "90", "10", "5"]
    code, out, _ = run(capsys, "--db", db.uri, "--json", "table", "status", "t")
    assert json.loads(out)["columns"] == [{"column": "y", "rows_valid": 90, "rows_stale": 10, "rows_missing": 5,
                                           "expression": None}]
    # The next backfill computes exactly the rows the status called stale or missing.
    assert tbl.backfill("y", spark=InProcessRunner()).rows_computed == 15
    state = tbl.status().columns[0]
    assert (state.rows_valid, state.rows_stale, state.rows_missing) == (105, 0, 0)


def test_view_status_counts_the_source_rows_appended_since_its_refresh(db, capsys):
    src = db.create_table("src", events_table(50))
    view = db.create_materialized_view("v", src.search(None).select({"x": "x"}))
    view.refresh(spark=InProcessRunner())
    at = src.version
    assert view.status().view.rows_behind == 0
    src.add(events_table(7, start=50))

    lag = view.status().view
    assert (lag.source, lag.source_version, lag.source_latest) == ("src", at, src.version)
    assert (lag.rows_created, lag.rows_updated, lag.rows_deleted, lag.rows_behind) == (7, 0, 0, 7)
    code, out, _ = run(capsys, "--db", db.uri, "--json", "table", "status", "v")
    assert code == 0 and json.loads(out)["view"]["rows_behind"] == 7
    code, out, _ = run(capsys, "--db", db.uri, "table", "status", "v")
    assert f"view of src: at source version {at}, source latest {src.version}; rows behind: 7 (7 created" in out
    src.delete("x < 3")
    src.dataset().update({"x": "x + 1"}, where="x = 10")
    lag = view.status().view
    assert (lag.rows_created, lag.rows_updated, lag.rows_deleted) == (7, 1, 3)


def test_cleanup_and_compact_through_the_command_line(db, capsys):
    tbl = db.create_table("t", events_table(30), max_rows_per_file=10)
    tbl.add_columns({"y": cli_double})
    tbl.backfill("y", spark=InProcessRunner())
    code, out, _ = run(capsys, "--db", db.uri, "--json", "compact", "t", "--target-rows-per-fragment", "100",
                       "--in-process")
    assert code == 0 and json.loads(out)["fragments_removed"] == 3 and json.loads(out)["fragments_added"] == 1
    assert len(tbl.dataset().get_fragments()) == 1 and tbl.status().columns[0].rows_valid == 30
    code, out, _ = run(capsys, "--db", db.uri, "--json", "cleanup", "--older-than-days", "0")
    assert code == 0 and sum(json.loads(out)["t"]["removed"].values()) > 0
    with pytest.raises(SystemExit) as usage:
        main(["--db", db.uri, "cleanup", "--older-than-days", "-1"])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "--older-than-days: must be a finite number of days from 0 to 999999999" in err


def test_a_database_directory_that_does_not_exist_is_refused_naming_it_not_taken_for_an_empty_lake(tmp_path, capsys):
    """A typo in ``--db`` is not a healthy empty database: every command says the directory does not exist (exit 2,
    one line) and creates nothing."""
    missing = tmp_path / "no-such-lake"
    for argv in (["jobs", "list"], ["jobs", "show", "20260101T000000-deadbeef"], ["table", "status", "t"],
                 ["cleanup"], ["compact", "t", "--in-process"]):
        code, out, err = run(capsys, "--db", str(missing), *argv)
        assert (code, out) == (2, ""), (argv, out, err)
        assert err.count("\n") == 1 and f"--db {missing}: no such database directory" in err, (argv, err)
    assert not missing.exists()
    empty = tmp_path / "empty-lake"
    empty.mkdir()
    code, out, err = run(capsys, "--db", str(empty), "jobs", "list")  # an existing, empty database: no jobs
    assert (code, out, err) == (0, "no jobs\n", "")


def test_a_failure_outside_the_packages_errors_is_one_line_too(db, capsys):
    """A table directory another process is still creating (no manifest yet): Lance's error, on one line, exit 1,
    without its Rust source paths -- not a traceback."""
    db.create_table("t", events_table(3))
    (Path(db.uri) / "half.lance" / "_versions").mkdir(parents=True)
    code, out, err = run(capsys, "--db", db.uri, "table", "status", "half")
    assert (code, out) == (1, "") and err.count("\n") == 1, err
    assert err.startswith("geneva-provider: ") and "half.lance" in err and "/rust/" not in err, err
    code, out, err = run(capsys, "--db", db.uri, "table", "status", "t")  # the other tables are fine
    assert code == 0 and "table t:" in out


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e9", "-1", "seven"])
def test_cleanup_refuses_a_number_of_days_that_is_not_finite_or_out_of_range_naming_it(db, capsys, value):
    """``--older-than-days nan / inf / 1e9``: a usage error (exit 2) naming the argument and the value, on one line,
    before any table is touched (no traceback)."""
    tbl = db.create_table("t", events_table(10))
    tbl.add_columns({"y": cli_double})
    tbl.backfill("y", spark=InProcessRunner())
    kept = db.list_jobs()
    capsys.readouterr()  # the backfill's own progress lines
    with pytest.raises(SystemExit) as usage:
        main(["--db", db.uri, "cleanup", f"--older-than-days={value}"])
    out, err = capsys.readouterr()
    assert usage.value.code == 2 and out == ""
    assert err.count("\n") == 1 and "argument --older-than-days" in err and repr(value) in err, err
    assert db.list_jobs() == kept


def test_cleanup_takes_the_longest_age_python_can_hold_and_removes_no_recent_job(db, capsys):
    """999999999 days reaches back before the year 1: nothing is that old, so no job's history goes."""
    tbl = db.create_table("t", events_table(10))
    tbl.add_columns({"y": cli_double})
    done = tbl.backfill("y", spark=InProcessRunner())
    capsys.readouterr()  # the backfill's own progress lines
    code, out, err = run(capsys, "--db", db.uri, "--json", "cleanup", "--older-than-days", "999999999")
    assert (code, err) == (0, ""), err
    assert json.loads(out)["t"]["removed"].get("job records", 0) == 0
    assert [r.job_id for r in db.list_jobs()] == [done.job_id]


def test_cancel_refuses_a_timeout_that_is_not_a_finite_number_of_seconds(db, capsys):
    for value in ("nan", "-5", "inf"):
        with pytest.raises(SystemExit) as usage:
            main(["--db", db.uri, "jobs", "cancel", "20260101T000000-deadbeef", "--wait", "--timeout", value])
        err = capsys.readouterr().err
        assert usage.value.code == 2 and "argument --timeout" in err and repr(value) in err, err


def test_a_bad_command_line_and_a_missing_directory_end_without_a_traceback_in_a_process_of_its_own(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, code, said in [(["--db", str(tmp_path / "typo"), "jobs", "list"], 2, str(tmp_path / "typo")),
                             (["--db", str(tmp_path), "cleanup", "--older-than-days", "nan"], 2, "'nan'"),
                             (["--db", str(tmp_path), "cleanup", "--older-than-days", "1e9"], 2, "'1e9'")]:
        done = subprocess.run([sys.executable, "-m", "geneva_provider.cli", *argv], capture_output=True, text=True,
                              env=env, timeout=120, check=False)
        assert (done.returncode, done.stdout) == (code, ""), (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


@pytest.mark.parametrize("argv", [[], ["jobs"], ["jobs", "list"], ["jobs", "show"], ["jobs", "cancel"], ["table"],
                                  ["table", "status"], ["cleanup"], ["compact"]])
def test_the_help_is_plain_text_not_restructured_text(capsys, argv):
    with pytest.raises(SystemExit) as shown:
        main([*argv, "--help"])
    out = capsys.readouterr().out
    assert shown.value.code == 0 and out.startswith("usage: geneva-provider")
    assert "`" not in out and not re.search(r":(class|func|mod|meth|attr):", out), out
    if not argv:
        assert "geneva-provider: the jobs and tables of a database" in out and "LanceHook" in out


@pytest.mark.parametrize("module", ["geneva_provider.demo", "geneva_provider.connect_server"])
def test_the_other_programs_help_is_plain_text_too(module):
    shown = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert shown.returncode == 0 and shown.stdout.startswith("usage:"), shown.stderr
    assert "`" not in shown.stdout and not re.search(r":(class|func|mod|meth|attr):", shown.stdout), shown.stdout


def test_the_console_script_module_runs_in_a_process_of_its_own(db):
    tbl = db.create_table("t", events_table(10))
    tbl.add_columns({"y": cli_double})
    done = tbl.backfill("y", spark=InProcessRunner())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([sys.executable, "-m", "geneva_provider.cli", "--db", db.uri, "--json", "jobs", "list"],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    assert [j["job_id"] for j in json.loads(listed.stdout)] == [done.job_id]
    missing = subprocess.run([sys.executable, "-m", "geneva_provider.cli", "--db", db.uri, "table", "status", "gone"],
                             capture_output=True, text=True, env=env, timeout=120, check=False)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "gone" in missing.stderr


def test_an_airflow_connection_names_the_database_and_its_secrets_are_never_printed(db, capsys, monkeypatch):
    secret = "S3CR3T-not-to-be-printed"
    db.create_table("t", events_table(3))
    monkeypatch.setenv("AIRFLOW_CONN_CLI_LAKE", json.dumps({
        "conn_type": "lance", "host": db.uri,
        "extra": {"secret_storage_options": {"aws_secret_access_key": secret}}}))
    code, out, err = run(capsys, "--conn-id", "cli_lake", "--json", "table", "status", "t")
    assert code == 0 and json.loads(out)["rows"] == 3 and secret not in out + err
    code, out, err = run(capsys, "--conn-id", "cli_lake", "table", "status", "gone")
    assert code == 2 and "gone" in err and secret not in out + err

"""The checkpoint store's layout: one module knows every key, and a store written by an older version is read.

``tests/fixtures/store_main`` was written by the code before the store-layout module existed
(``tests/store_fixture.py``): its keys must parse to the record kinds they are, ``key()`` must give back
the very same strings, and today's code must list its jobs, load its plans, clean it up and finish its
unwritten backfill from its batch checkpoints without computing a row.
"""

from __future__ import annotations

import ast
import datetime as dt
import io
import re
import tokenize
from pathlib import Path

import pytest

from geneva_provider.core.contracts.kinds import Stage
from geneva_provider.core.contracts.models import JobRecord, JobStatus, Ledger
from geneva_provider.core.errors import InvalidArgumentError
from geneva_provider.core.store.checkpoint import InMemoryCheckpointStore
from geneva_provider.core.store.layout import (
    JOB_ID,
    BatchKey,
    CancelKey,
    CommittedKey,
    ConnectSessionKey,
    JobRecordKey,
    JobStore,
    LedgerKey,
    PlanKey,
    RunningKey,
    StagedKey,
    StageLeaseKey,
    StageResultKey,
    batch_prefix,
    job_prefix,
    new_job_id,
    parse_key,
)
from tests.store_fixture import FIXTURE

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "geneva_provider" / "core" / "store" / "layout.py"

# What each key of the fixture store is, by the family the code of the day wrote it as.
EXPECTED_KINDS = {"job-": JobRecordKey, "ledger-": LedgerKey, "-committed": CommittedKey,
                  "-apply-result": StageResultKey, "-connect-session": ConnectSessionKey, "_staged-": StagedKey,
                  "_range-": BatchKey, "plan-": PlanKey}


def fixture_keys() -> list[tuple[str, str]]:
    lines = (FIXTURE / "keys.txt").read_text().splitlines()
    return [(table, key) for table, key in (line.split(" ", 1) for line in lines)]


def expected_kind(key: str) -> type:
    return next(kind for marker, kind in EXPECTED_KINDS.items() if marker in key)


# ------------------------------------------------------------------ (1) the layout main writes
def test_every_key_of_a_store_written_by_main_parses_to_its_kind_and_back():
    keys = fixture_keys()
    assert {expected_kind(key) for _, key in keys} == set(EXPECTED_KINDS.values())  # every family is there
    for _, key in keys:
        parsed = parse_key(key)
        assert type(parsed) is expected_kind(key), key
        assert parsed.key() == key


def test_the_fixture_keys_are_what_the_fixture_store_holds():
    """keys.txt lists the checked-in store exactly (the files are the keys plus ``.lance``)."""
    on_disk = sorted((table, p.name.removesuffix(".lance")) for table in ("events", "doubled")
                     for p in (FIXTURE / "db" / f"{table}.lance" / "_checkpoints").iterdir())
    assert on_disk == sorted(fixture_keys())


# ------------------------------------------------------------------ (2) a store written by main is read
ODD = ["a b", "ünïcode/✓", "x_frag-1_range-0-2", "plan-", "'; DROP", "-committed", "_staged-" + "0" * 32, ""]


@pytest.mark.parametrize("name", ODD)
def test_user_strings_are_hashed_and_keys_round_trip(name):
    job = job_prefix(name, name or "v1", name, name or None, f"/tmp/{name}.lance")
    assert re.fullmatch(r"udf-[0-9a-f]{16}_ver-\w+_col-[0-9a-f]{16}_where-[0-9a-f]{32}_uri-[0-9a-f]{32}", job)
    prefix = batch_prefix(job, [name, "b.lance"])
    job_id = new_job_id()
    records = [PlanKey(job_id), CommittedKey(job_id), ConnectSessionKey(job_id), CancelKey(job_id),
               JobRecordKey(job_id), LedgerKey.of(job), BatchKey(prefix, 3, 0, 10),
               BatchKey(prefix, 3, 10, 20, partial=True), StagedKey(job), RunningKey(job_id, 7),
               *(StageResultKey(job_id, s) for s in Stage), *(StageLeaseKey(job_id, s) for s in Stage)]
    for record in records:
        key = record.key()
        assert "/" not in key and len(key) + len(".lance") <= 255  # a file name
        assert parse_key(key) == record, key
    assert BatchKey(prefix, 3, 0, 10).job_prefix == job
    assert len({r.key() for r in records}) == len(records)


def test_job_ids_are_sortable_and_of_one_format():
    first = new_job_id(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
    assert re.fullmatch(JOB_ID, first) and first.startswith("20260102T030405-")
    assert first < new_job_id()


def test_keys_of_no_family_and_hand_made_ids():
    for key in ["plan-x", "plan-20260101T000000-deadbeef-bogus-result", "udf-a_frag-1", "notes", "job-"]:
        assert parse_key(key) is None, key
    assert parse_key("job-j1") == JobRecordKey("j1")  # records are read whatever their id
    assert PlanKey.of("plan-j") == PlanKey("j")
    with pytest.raises(InvalidArgumentError, match="not a plan reference: 'job-j'"):
        PlanKey.of("job-j")


def test_the_job_store_reads_and_writes_by_job():
    store = JobStore(InMemoryCheckpointStore())
    job_id = new_job_id()
    record = JobRecord(job_id=job_id, kind="backfill", table="t", column="c", created_at="2026-01-01T00:00:00",
                       updated_at="2026-01-01T00:00:00", status=JobStatus.PENDING)
    store.put_record(record)
    store.put_plan(job_id, "{}")
    store.put_ledger("udf-x", Ledger(fragments={1: ["a"]}))
    assert store.record(job_id) == record and store.record_ids() == [job_id] and store.has_record(job_id)
    assert store.plans() == [PlanKey(job_id)] and store.plan_text(job_id) == "{}"
    assert store.ledger("udf-x").fragments == {1: ["a"]} and not store.has_ledger("udf-y")
    assert store.plan_keys(job_id) == [PlanKey(job_id).key()] and not store.is_committed(job_id)
    store.delete_record(job_id)
    assert store.record_ids() == []


# ------------------------------------------------------------------ no key is built outside the module
KEY_LITERAL = re.compile(r"(?<![\w-])(?:plan|job|ledger|running)-|-committed\b|_(?:ver|col|where|uri|srcfiles)-"
                         r"|_frag-|_range-|_staged-|\}-result|-connect-session|_partial\b")


def key_literals(root: Path, dirs: tuple[str, ...] = ("geneva_provider", "spark_apps")) -> list[str]:
    """``file:line: literal`` for each string literal (docstrings aside) that spells part of a store key."""
    hits = []
    for path in sorted(p for d in dirs for p in (root / d).rglob("*.py")):
        if path.resolve() == (root / LAYOUT.relative_to(ROOT)).resolve():
            continue
        source = path.read_text()
        docstrings = {node.body[0].value.lineno for node in ast.walk(ast.parse(source))
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.STRING and tok.start[0] not in docstrings and KEY_LITERAL.search(tok.string):
                hits.append(f"{path.relative_to(root)}:{tok.start[0]}: {tok.string}")
    return hits


def test_no_store_key_literal_outside_the_store_layout_module():
    hits = key_literals(ROOT)
    assert not hits, "store keys built outside geneva_provider/core/store/layout.py:\n" + "\n".join(hits)


def test_the_key_literal_check_bites(tmp_path):
    tree = tmp_path / "tree"
    (tree / "geneva_provider" / "pipeline").mkdir(parents=True)
    (tree / "spark_apps").mkdir()
    (tree / "geneva_provider" / "pipeline" / "x.py").write_text(
        '"""Keys like plan-<id> in a docstring are fine."""\n\n\n'
        'def k(job_id):\n    return f"plan-{job_id}-committed"\n')
    (tree / "spark_apps" / "y.py").write_text('KEY = "ledger-"\nARG = "--result-key"\n')
    assert key_literals(tree) == ['geneva_provider/pipeline/x.py:5: f"plan-{job_id}-committed"',
                                  'spark_apps/y.py:1: "ledger-"']

"""The one commit loop: real conflicts of two writers on a real Lance table, retried within the policy,
given up past it with an error naming the table, and a commit that already landed never made twice.

Every commit of the package -- column files, a UDTF view's rows, a compaction's rewrite, schema changes --
goes through ``pipeline/committer.py``; conflicts are told apart by Lance's exception types, never by
the text of its messages (the last test greps the package for such matching).

The part without a JVM; what needs a Spark session is in tests/spark/test_committer.py.
"""

from __future__ import annotations

import ast
import os
import re
import time
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.file import LanceFileWriter
from lance.fragment import DataFile

import geneva_provider as gp
from geneva_provider.core.errors import CommitError
from geneva_provider.core.fragments import leaf_field_ids, output_files
from geneva_provider.core.incarnations import incarnations
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.columns.commit import commit_column_files
from geneva_provider.pipeline.committer import (
    Attempt,
    CommitPolicy,
    Conflict,
    commit,
    commit_messages,
    conflict_of,
)
from geneva_provider.pipeline.maintenance.compaction import _preempted
from geneva_provider.stages import plan_compaction

Op = lance.LanceOperation
FAST = {"backoff_seconds": 0.01}


@pytest.fixture
def table(tmp_path) -> TableRef:
    """Table 'events': x = 0..5 in two fragments, and an empty int64 column y."""
    uri = str(tmp_path / "events.lance")
    ds = lance.write_dataset(pa.table({"x": list(range(6))}), uri, max_rows_per_file=3, enable_stable_row_ids=True)
    ds.add_columns(pa.field("y", pa.int64()))
    return TableRef("events", uri)


def _file(ref: TableRef, values: list[int]) -> DataFile:
    """A staged file of column y for fragment 0."""
    ds = ref.dataset()
    rel = f"{uuid.uuid4().hex}.lance"
    schema = pa.schema([pa.field("y", pa.int64())])
    with LanceFileWriter(os.path.join(ref.uri, "data", rel), schema) as w:
        w.write_batch(pa.record_batch([pa.array(values, pa.int64())], schema=schema))
    ids = leaf_field_ids(ds.lance_schema.field("y"))
    return DataFile(rel, fields=ids, column_indices=[0], file_major_version=2, file_minor_version=2,
                    file_size_bytes=w.size_bytes)


def _replace(ref: TableRef, values: list[int], read_version: int) -> lance.LanceDataset:
    """Fills y in fragment 0 with ``values``, committed against ``read_version``."""
    op = Op.DataReplacement([Op.DataReplacementGroup(0, _file(ref, values))])
    return lance.LanceDataset.commit(ref.uri, op, read_version=read_version)


def _y(ref: TableRef) -> list[int | None]:
    return ref.dataset().to_table(columns=["y"]).column("y").to_pylist()


def test_a_real_conflict_between_two_writers_is_retried_at_the_latest_version(table):
    start = table.dataset().version

    def mine(attempt: Attempt) -> int:
        if attempt.number == 0:  # another writer fills the same fragment first: this commit is stale
            _replace(table, [7, 7, 7], start)
        return _replace(table, [1, 2, 3], attempt.latest.version if attempt.latest else start).version

    done = commit(table, "fill of y", mine, policy=CommitPolicy(**FAST))
    assert done.retries == 1 and not done.landed_before
    assert done.value == start + 2 == table.dataset().version  # theirs, then mine at the latest version
    assert _y(table)[:3] == [1, 2, 3]
    table.dataset().validate()


def test_the_conflict_is_classified_by_lances_exception_type(table):
    start = table.dataset().version
    _replace(table, [7, 7, 7], start)
    with pytest.raises(OSError) as preempted:
        _replace(table, [1, 2, 3], start)
    assert conflict_of(preempted.value) is Conflict.RETRYABLE  # lance.commit.CommitConflictError(retryable=True)

    ds = table.dataset()
    fid = ds.lance_schema.field("y").id()
    updates = [Op.UpdateConfig(field_metadata_updates={fid: Op.UpdateMap({"k": v})}) for v in "ab"]
    lance.LanceDataset.commit(table.uri, updates[0], read_version=ds.version)
    with pytest.raises(OSError) as incompatible:
        lance.LanceDataset.commit(table.uri, updates[1], read_version=ds.version)
    assert conflict_of(incompatible.value) is Conflict.INCOMPATIBLE  # retryable=False: rebuild, then retry
    assert conflict_of(OSError("Retryable commit conflict for version 3")) is None  # the text says nothing


def test_a_writer_that_keeps_losing_gives_up_after_its_retries_naming_the_table(table):
    start = table.dataset().version

    def always_stale(attempt: Attempt) -> int:
        _replace(table, [7, 7, 7], table.dataset().version)  # the other writer wins every round
        return _replace(table, [1, 2, 3], start).version

    with pytest.raises(CommitError, match=r"fill of y to table 'events' still conflicted after 2 retries .*"
                                          r"commit_retries=2.*preempted") as failed:
        commit(table, "fill of y", always_stale, policy=CommitPolicy(max_retries=2, **FAST))
    assert failed.value.retryable  # a later run meets other writers
    assert _y(table)[:3] == [7, 7, 7]
    assert table.dataset().version == start + 3  # only the other writer's three commits landed


def test_a_writer_that_keeps_losing_gives_up_within_its_time_budget(table):
    start = table.dataset().version

    def always_stale(attempt: Attempt) -> int:
        _replace(table, [7, 7, 7], table.dataset().version)
        return _replace(table, [1, 2, 3], start).version

    t0 = time.monotonic()
    with pytest.raises(CommitError, match=r"table 'events' still conflicted.*commit_timeout=0.5s"):
        commit(table, "fill of y", always_stale, policy=CommitPolicy(max_retries=1_000, budget_seconds=0.5,
                                                                     backoff_seconds=0.05))
    assert time.monotonic() - t0 < 10  # stopped by the budget, not by the 1,000 retries


def test_an_incompatible_conflict_fails_at_once_unless_the_change_is_rebuilt_from_the_latest_version(table):
    ds = table.dataset()
    fid = ds.lance_schema.field("y").id()

    def set_k(value: str, first_read: int) -> object:
        def apply(attempt: Attempt) -> int:
            if attempt.number == 0:  # another writer sets the same field's metadata first
                lance.LanceDataset.commit(table.uri, Op.UpdateConfig(
                    field_metadata_updates={fid: Op.UpdateMap({"k": "theirs"})}), read_version=first_read)
            read = attempt.latest.version if attempt.latest else first_read
            return lance.LanceDataset.commit(table.uri, Op.UpdateConfig(
                field_metadata_updates={fid: Op.UpdateMap({"k": value})}), read_version=read).version
        return apply

    with pytest.raises(CommitError, match=r"metadata of y to table 'events' failed: Incompatible"):
        commit(table, "metadata of y", set_k("mine", ds.version), policy=CommitPolicy(**FAST))
    assert table.dataset().schema.field("y").metadata == {b"k": b"theirs"}

    done = commit(table, "metadata of y", set_k("mine", table.dataset().version), policy=CommitPolicy(**FAST),
                  reapplies=True)
    assert done.retries == 1 and table.dataset().schema.field("y").metadata == {b"k": b"mine"}


def test_a_retried_stage_sees_its_commit_landed_by_its_message_and_does_not_commit_again(table):
    start = table.dataset().version
    message = f"geneva test {uuid.uuid4().hex}"
    calls = []

    def apply(attempt: Attempt) -> int:
        calls.append(attempt.number)
        op = Op.DataReplacement([Op.DataReplacementGroup(0, _file(table, [1, 2, 3]))])
        return lance.LanceDataset.commit(table.uri, op, read_version=start, commit_message=message).version

    def landed(ds: lance.LanceDataset) -> int | None:
        return ds.version if message in commit_messages(ds, start) else None

    first = commit(table, "fill of y", apply, landed=landed, look_first=True)
    assert (first.value, first.landed_before, calls) == (start + 1, False, [0])
    _replace(table, [4, 5, 6], table.dataset().version)  # another writer commits after it
    again = commit(table, "fill of y", apply, landed=landed, look_first=True)  # the stage, run again
    assert again.landed_before and calls == [0]  # not applied a second time
    assert table.dataset().version == start + 2 and _y(table)[:3] == [4, 5, 6]


def test_column_files_committed_again_by_a_retried_stage_land_once(table):
    start = table.dataset().version
    ds = table.dataset()
    ids = leaf_field_ids(ds.lance_schema.field("y"))
    mine = _file(table, [1, 2, 3])
    first = commit_column_files(table.uri, ["y"], {0: mine}, start, output_field_ids=ids,
                                incarnations=incarnations(ds, ["y"]), base_files={0: None},
                                table="events")
    assert first.committed == [0] and first.version == start + 1
    # The stage runs again with the same staged file and read version (its record of the commit was lost):
    # Lance refuses the stale replacement, and the retry finds the fragment already holds the file.
    again = commit_column_files(table.uri, ["y"], {0: mine}, start, output_field_ids=ids,
                                incarnations=incarnations(ds, ["y"]), base_files={0: None},
                                table="events", policy=CommitPolicy(**FAST))
    assert again.committed == [0] and again.changed == [] and again.retries == 1
    assert table.dataset().version == start + 1  # nothing committed twice
    assert output_files(table.dataset().get_fragments()[0].metadata, ids) == mine.path
    assert _y(table)[:3] == [1, 2, 3]


def test_a_compaction_preempted_by_a_delete_is_seen_in_the_table_not_in_the_error_text(table):
    from lance.optimize import Compaction, CompactionOptions

    ds = table.dataset()
    results = [t.execute(ds) for t in Compaction.plan(ds, CompactionOptions(target_rows_per_fragment=6)).tasks]
    assert not _preempted(results, table.dataset())
    table.dataset().delete("x = 1")
    with pytest.raises(OSError) as failed:
        Compaction.commit(table.dataset(), results)
    assert conflict_of(failed.value) is None  # Lance's compaction commit raises a plain OSError for it
    assert _preempted(results, table.dataset())  # what the committer retries on


def _compaction_table(db) -> gp.Table:
    return db.create_table("events", pa.table({"x": list(range(400))}), max_rows_per_file=50)


def test_compaction_takes_commit_options_beside_lances_and_checks_them(db):
    tbl = _compaction_table(db)
    with pytest.raises(gp.InvalidArgumentError, match=r"compaction of table 'events': commit_retries must be a "
                                                      r"non-negative integer, got -1"):
        plan_compaction(tbl.ref, {"commit_retries": -1})
    with pytest.raises(gp.InvalidArgumentError, match=r"unknown option\(s\) \['retries'\].*commit_timeout"):
        plan_compaction(tbl.ref, {"retries": 3})


def test_no_conflict_is_recognised_by_the_text_of_lances_messages():
    """No string in the package's code (docstrings aside) holds a piece of Lance's conflict messages."""
    package = Path(gp.__file__).parent
    texts = re.compile(r"Retryable commit conflict|preempted by|Incompatible transaction|Fragment being replaced|"
                       r"target fragment|removed by concurrent|Please retry", re.IGNORECASE)
    found = []
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                      and node.body and isinstance(node.body[0], ast.Expr)}
        found += [f"{path.relative_to(package)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and texts.search(node.value)]
    assert found == []

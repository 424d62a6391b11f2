"""Commits under real Lance conflicts: jittered retries within a budget, type-recognised conflicts."""

from __future__ import annotations

import os
import time
import uuid

import lance
import pyarrow as pa
import pytest
from lance.file import LanceFileWriter
from lance.fragment import DataFile

from geneva_provider.core.errors import CommitError
from geneva_provider.core.fragments import leaf_field_ids, output_files
from geneva_provider.core.incarnations import incarnations
from geneva_provider.pipeline.columns.commit import commit_column_files
from geneva_provider.pipeline.committer import CommitPolicy, is_retryable_conflict


def _staged(uri: str, values: list[int], field_id: int) -> DataFile:
    """A data file holding column ``y`` for fragment 0 (what the writer stages)."""
    rel = f"{uuid.uuid4().hex}.lance"
    schema = pa.schema([pa.field("y", pa.int64())])
    with LanceFileWriter(os.path.join(uri, "data", rel), schema, version="2.0") as w:
        w.write_batch(pa.record_batch([pa.array(values, pa.int64())], schema=schema))
    return DataFile(rel, fields=[field_id], column_indices=[0], file_major_version=2, file_minor_version=0)


@pytest.fixture
def table(tmp_path):
    uri = str(tmp_path / "t.lance")
    ds = lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri, data_storage_version="2.0")
    ds.add_columns(pa.field("y", pa.int64()))
    ds = lance.dataset(uri)
    return uri, ds.version, leaf_field_ids(ds.lance_schema.field("y"))


def _concurrent_writer_wins(uri: str, version: int, ids: list[int]) -> str:
    """Another backfill of the same column commits first; returns its file."""
    other = _staged(uri, [10, 20, 30], ids[0])
    commit_column_files(uri, ["y"], {0: other}, version, output_field_ids=ids,
                        incarnations=incarnations(lance.dataset(uri), ["y"]), base_files={0: None})
    return output_files(lance.dataset(uri).get_fragments()[0].metadata, ids)


def test_a_conflict_is_lances_retryable_error_and_is_retried_at_the_latest_version(table):
    uri, version, ids = table
    theirs = _concurrent_writer_wins(uri, version, ids)
    mine = _staged(uri, [1, 2, 3], ids[0])
    op = lance.LanceOperation.DataReplacement([lance.LanceOperation.DataReplacementGroup(0, mine)])
    with pytest.raises(Exception) as conflict:
        lance.LanceDataset.commit(uri, op, read_version=version)
    assert is_retryable_conflict(conflict.value)  # recognised by type (CommitConflictError.retryable)

    outcome = commit_column_files(uri, ["y"], {0: mine}, version, output_field_ids=ids,
                        incarnations=incarnations(lance.dataset(uri), ["y"]), base_files={0: None},
                                  policy=CommitPolicy(max_retries=3, backoff_seconds=0.01))
    # Retried at the latest version, which shows the other writer's file: not overwritten, reported.
    assert outcome.retries == 1 and outcome.changed == [0] and outcome.committed == []
    assert output_files(lance.dataset(uri).get_fragments()[0].metadata, ids) == theirs
    assert lance.dataset(uri).to_table().column("y").to_pylist() == [10, 20, 30]
    lance.dataset(uri).validate()


def test_retries_stop_at_the_configured_count_and_name_it(table):
    uri, version, ids = table
    _concurrent_writer_wins(uri, version, ids)
    mine = _staged(uri, [1, 2, 3], ids[0])
    with pytest.raises(CommitError, match=r"still conflicted after 0 retries.*commit_retries=0"):
        commit_column_files(uri, ["y"], {0: mine}, version, output_field_ids=ids,
                        incarnations=incarnations(lance.dataset(uri), ["y"]), base_files={0: None},
                            policy=CommitPolicy(max_retries=0))
    assert lance.dataset(uri).to_table().column("y").to_pylist() == [10, 20, 30]


def test_retries_stop_within_the_time_budget(table):
    uri, version, ids = table
    _concurrent_writer_wins(uri, version, ids)
    mine = _staged(uri, [1, 2, 3], ids[0])
    # Without base files the rebase keeps the fragment, so every retry at a stale version conflicts
    # again only if someone keeps committing: a budget of 0 s stops after the first attempt.
    t0 = time.monotonic()
    with pytest.raises(CommitError, match=r"commit_timeout=0"):
        commit_column_files(uri, ["y"], {0: mine}, version, output_field_ids=ids,
                        incarnations=incarnations(lance.dataset(uri), ["y"]), base_files={0: None},
                            policy=CommitPolicy(max_retries=100, budget_seconds=0, backoff_seconds=5))
    assert time.monotonic() - t0 < 5  # never slept the 5 s backoff: the budget was spent


def test_the_commit_policy_comes_from_the_job_options():
    from geneva_provider.core.contracts.models import PlanSettings

    settings = PlanSettings(checkpoint_size=1, min_checkpoint_size=1, max_checkpoint_size=1, parallelism=1,
                            commit_retries=0, commit_timeout=30)
    assert CommitPolicy.of(settings) == CommitPolicy(max_retries=0, budget_seconds=30)
    assert CommitPolicy.of(settings.model_copy(update={"commit_retries": None, "commit_timeout": None})) == \
        CommitPolicy()

"""Compaction never costs a live job its work, and a job that ended -- however it ended -- holds nothing.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_compaction_holds.py.
"""

from __future__ import annotations

import pytest

import geneva_provider as gp
from geneva_provider.pipeline.stages.job_records import LEASE_ENV
from geneva_provider.stages import (
    plan_backfill,
    plan_compaction,
)
from tests.helpers import counting_double, events_table


@pytest.mark.parametrize("value", ["soon", "0", "-5"])
def test_a_bad_lease_setting_fails_the_plan_naming_it_and_stores_nothing(db, call_dir, monkeypatch, value):
    tbl = db.create_table("events", events_table(2_000), max_rows_per_file=1_000)
    tbl.add_columns({"y": counting_double(call_dir)})
    monkeypatch.setenv(LEASE_ENV, value)
    for plan in (lambda: plan_backfill(tbl.ref, "y"),
                 lambda: plan_compaction(tbl.ref, {"target_rows_per_fragment": 2_000})):
        with pytest.raises(gp.InvalidArgumentError, match=rf"{LEASE_ENV} must be a positive number.*'{value}'"):
            plan()
    assert tbl.checkpoint_store.list_keys("") == [] and db.list_jobs("events") == []

"""On Spark: a backfill planned and applied, its column dropped and added again, then its write+commit stage runs.

The stage (an Airflow retry, a slow writer, a notebook run stage by stage) is refused with the package's error
naming the column and both incarnations, and nothing lands: Lance gave the new column the old field ids, so a
commit would have made a string column unreadable and a float64 one read the int64 bits.  The rerun plans the
new column afresh.  tests/unit/test_column_incarnations.py holds the check itself, with no JVM.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import ColumnReplacedError
from geneva_provider.core.incarnations import incarnations
from geneva_provider.core.store.layout import JobStore
from geneva_provider.stages import BackfillOptions, load_plan, plan_backfill, run_apply, run_write_commit
from tests.helpers import events_table
from tests.unit.test_column_incarnations import NEW, ROWS, data_files, doubled, field_ids, new_udf


def values(tbl: gp.Table) -> dict[int, object]:
    t = tbl.to_arrow(["x", "y"])
    return dict(zip(t.column("x").to_pylist(), t.column("y").to_pylist(), strict=True))


@pytest.mark.parametrize(("kind", "how"), [*((k, "package") for k in NEW), ("float64", "pylance")])
def test_a_write_commit_into_a_column_re_created_since_its_plan_is_refused_and_the_rerun_computes_it(
        db, spark, kind, how):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    tbl.add_columns({"y": doubled})
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(checkpoint_size=50))
    assert run_apply(summary.plan_uri, spark).rows_computed == ROWS
    plan, store = load_plan(summary.plan_uri)
    ids = field_ids(tbl)
    if how == "package":
        tbl.drop_columns(["y"])
        tbl.add_columns({"y": new_udf(kind)})
    else:  # outside the package: a plain column of that name
        lance.dataset(tbl.uri).drop_columns(["y", "__geneva_fp__y"])
        lance.dataset(tbl.uri).add_columns(pa.field("y", NEW[kind][0]))
    assert {c: i for c, i in field_ids(tbl).items() if c == "y"} == {"y": ids["y"]}  # Lance reused the id
    before, files = tbl.dataset().version, data_files(tbl)
    now = incarnations(tbl.dataset(), ["y"])[0]

    with pytest.raises(ColumnReplacedError) as err:
        run_write_commit(summary.plan_uri, spark)
    assert data_files(tbl) == files  # refused before any column file was written
    message = str(err.value)
    assert "column 'y' of table 'events' was dropped and re-created" in message
    assert plan.incarnations[0].describe() in message and now.describe() in message
    ds = tbl.dataset()
    assert ds.version == before and not JobStore(store).is_committed(plan.job_id)  # nothing landed
    ds.validate()
    assert ds.schema.field("y").type == NEW[kind][0]
    assert ds.to_table(columns=["y"]).column("y").to_pylist() == [None] * ROWS  # readable, all NULL

    if how == "pylance":  # a plain column: declare the UDF on it the package's way, then backfill
        tbl.drop_columns(["y"])
        tbl.add_columns({"y": new_udf(kind)})
    job = tbl.backfill("y", spark=spark)  # the rerun plans afresh
    assert job.rows_computed == ROWS
    assert tbl.dataset().schema.field("y").type == NEW[kind][0]
    assert values(tbl) == {x: NEW[kind][1](x) for x in range(ROWS)}
    tbl.dataset().validate()


def test_values_checkpointed_for_another_type_under_the_same_udf_version_are_computed_again(db, spark):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=100)
    tbl.add_columns({"y": doubled})  # name 'doubled', version '1': int64
    summary = plan_backfill(tbl.ref, "y", BackfillOptions(checkpoint_size=50))
    assert run_apply(summary.plan_uri, spark).rows_computed == ROWS
    tbl.drop_columns(["y"])
    tbl.add_columns({"y": new_udf("float64", name="doubled", version="1")})
    job = tbl.backfill("y", spark=spark, checkpoint_size=50)
    assert (job.rows_computed, job.rows_reused) == (ROWS, 0)
    assert values(tbl) == {x: x / 4 for x in range(ROWS)}  # not the int64 doubles, cast
    tbl.dataset().validate()

"""A multi-output group follows the rename of any of its columns, on real Spark: the values stay valid, a later
``add()`` works and the next backfill computes exactly the rows added since into the renamed columns, one call a
row; a member made non-nullable is refused, naming the group, and the table is unchanged.
"""

from __future__ import annotations

import pytest

from geneva_provider.core.errors import ColumnError
from tests.helpers import clear_calls, counting_dims, dims_of, events_table, read_calls

ROWS = 2_000


def _states(tbl):
    return {c.column: (c.rows_valid, c.rows_stale, c.rows_missing) for c in tbl.status().columns}


def test_a_group_renamed_member_by_member_backfills_exactly_the_new_rows(db, spark, call_dir):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=500)
    tbl.add_columns(counting_dims(call_dir))
    tbl.backfill("height", spark=spark, progress=False)
    clear_calls(call_dir)

    tbl.alter_columns({"path": "label", "rename": "name"})  # a member
    tbl.alter_columns({"path": "height", "rename": "tall"})  # the lead, with the group's fingerprint column
    version, schema = tbl.version, tbl.schema
    with pytest.raises(ColumnError, match=r"column 'ratio' of table 'events' is in the multi-output group \['tall', "
                                          r"'name', 'ratio'\] that UDF 'dims' computes in one call: it must stay "
                                          r"nullable"):
        tbl.alter_columns({"path": "ratio", "nullable": False})
    assert tbl.version == version and tbl.schema == schema
    assert read_calls(call_dir) == [] and _states(tbl) == {"tall": (ROWS, 0, 0)}

    tbl.add(events_table(300, start=ROWS))
    result = tbl.backfill("name", spark=spark, progress=False)  # any column of the group backfills it
    assert sorted(read_calls(call_dir)) == list(range(ROWS, ROWS + 300))  # the new rows, each once
    assert result.rows_computed == 300
    got = tbl.to_arrow(["x", "tall", "name", "ratio"]).to_pydict()
    assert [(h, n, r) for h, n, r in zip(got["tall"], got["name"], got["ratio"], strict=True)] == \
        [dims_of(x) for x in got["x"]]
    assert _states(tbl) == {"tall": (ROWS + 300, 0, 0)}
    tbl.dataset().validate()

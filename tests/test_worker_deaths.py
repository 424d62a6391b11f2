"""UDFs that kill their Python worker (os._exit, a segfault, the Python memory limit) fail with a UDFExecutionError
naming the UDF, column, table, fragment and the cause; nothing is committed and a rerun with the fix works."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import geneva_provider as gp
from tests.helpers import events_table

ROWS, PER_FRAGMENT = 400, 100  # four fragments; the UDF dies on x == 250 (fragment 2)


def _dying_udf(flag: str, how: str) -> gp.UDF:
    """x*2, except that it kills its worker (``how``) at x == 250 while the file ``flag`` exists."""

    @gp.udf(data_type=pa.int64(), name="explode")
    def explode(x: int) -> int:
        if x == 250 and os.path.exists(flag):
            if how == "exit":
                os._exit(3)
            elif how == "segfault":
                import ctypes

                ctypes.string_at(0)
            elif how == "memory":
                hog = bytearray(8 * 1024 ** 3)  # far beyond the worker's limit
                return len(hog)
        return x * 2

    return explode


def _table(db, tmp_path, how: str):
    tbl = db.create_table("events", events_table(ROWS), max_rows_per_file=PER_FRAGMENT)
    flag = tmp_path / f"{how}.flag"
    flag.write_text("die")
    tbl.add_columns({"y": _dying_udf(str(flag), how)})
    return tbl, flag


def _assert_untouched_then_rerun(tbl, flag, spark, version_before: int) -> None:
    assert tbl.version == version_before  # nothing committed
    assert tbl.to_arrow(columns=["y"]).column("y").null_count == ROWS
    tbl.dataset().validate()
    flag.unlink()  # the UDF no longer dies
    result = tbl.backfill("y", spark=spark)
    assert result.rows_computed + result.rows_reused == ROWS
    rows = tbl.to_arrow(columns=["x", "y"]).to_pylist()
    assert all(r["y"] == r["x"] * 2 for r in rows) and len(rows) == ROWS
    tbl.dataset().validate()


@pytest.mark.parametrize("how, cause", [
    ("exit", r"os\._exit\(3\)"),
    ("segfault", r"Segmentation fault"),
])
def test_a_udf_that_kills_its_worker_is_named_with_its_rows_and_cause(db, tmp_path, spark, how, cause):
    tbl, flag = _table(db, tmp_path, how)
    before = tbl.version
    with pytest.raises(gp.UDFExecutionError) as info:
        tbl.backfill("y", spark=spark)
    message = str(info.value)
    assert "UDF 'explode'" in message and "column 'y'" in message and "table 'events'" in message
    assert "fragment 2" in message
    assert re.search(cause, message), message
    assert "Py4J" not in message and "\tat " not in message and len(message.splitlines()) == 1
    assert not [k for k in tbl.checkpoint_store.list_keys("running-")]  # no marker left behind
    _assert_untouched_then_rerun(tbl, flag, spark, before)

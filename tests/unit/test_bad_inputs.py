"""Bad input: every public entry point fails with a package error naming the culprit, and changes nothing.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_bad_inputs.py.
"""

from __future__ import annotations

import pytest

import geneva_provider as gp
from tests.spark.test_bad_inputs import RUST_PATH, double


# ---------------------------------------------------------------------- UDFs
def test_a_filter_lance_cannot_run_is_reported_briefly(db):
    """Lance prints whole logical plans for some filters (kilobytes): the message keeps a few hundred characters."""
    tbl = db.create_table("events", {"id": [1, 2], "x": [1, 2]})
    version = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"'sum\(x\) > 3'.*'events'") as info:
        tbl.count_rows("sum(x) > 3")
    assert len(str(info.value)) < 500 and not RUST_PATH.search(str(info.value))
    assert tbl.version == version


def test_a_udf_column_goes_with_its_fingerprint_and_may_go_with_its_inputs(db):
    """Dropping ``y`` drops ``__geneva_fp__y``; ``x`` may go in the same call as ``y``, which reads it."""
    tbl = db.create_table("events", {"id": [1, 2], "x": [1, 2]})
    tbl.add_columns({"y": double})
    tbl.drop_columns(["x", "y"])
    assert tbl.schema.names == ["id"]
    version = tbl.version
    with pytest.raises(gp.InvalidArgumentError, match=r"'events'.*every column"):
        tbl.drop_columns(["id"])
    assert tbl.version == version

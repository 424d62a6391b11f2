"""The one commit loop: real conflicts of two writers on a real Lance table, retried within the policy,
given up past it with an error naming the table, and a commit that already landed never made twice.

Every commit of the package -- column files, a UDTF view's rows, a compaction's rewrite, schema changes --
goes through ``pipeline/committer.py``; conflicts are told apart by Lance's exception types, never by
the text of its messages (the last test greps the package for such matching).

The part that needs a Spark session; the rest is in tests/unit/test_committer.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.errors import CommitError
from geneva_provider.stages import plan_compaction, run_compaction


def _compaction_table(db) -> gp.Table:
    return db.create_table("events", pa.table({"x": list(range(400))}), max_rows_per_file=50)


def test_compaction_honours_commit_retries(db, spark):
    tbl = _compaction_table(db)
    summary = plan_compaction(tbl.ref, {"target_rows_per_fragment": 400, "commit_retries": 0})
    tbl.delete("x = 7")  # a writer commits to a fragment being rewritten, after the plan
    with pytest.raises(CommitError, match=r"compaction .* to table 'events' still conflicted after 0 retries.*"
                                          r"commit_retries=0"):
        run_compaction(summary.plan_uri, spark)  # (before, it planned and ran again twice, whatever it was told)
    assert len(tbl.dataset().get_fragments()) == 8 and tbl.count_rows() == 399  # nothing rewritten, nothing lost

    summary = plan_compaction(tbl.ref, {"target_rows_per_fragment": 400, "commit_retries": 1})
    tbl.delete("x = 8")
    result = run_compaction(summary.plan_uri, spark)  # planned again at the latest version, and committed
    assert (result.fragments_removed, result.fragments_added) == (8, 1)
    assert len(tbl.dataset().get_fragments()) == 1
    assert tbl.count_rows() == 398 and tbl.count_rows("x = 7 OR x = 8") == 0



"""Index builds on Spark: vector (IVF_*), scalar (BTREE, BITMAP, LABEL_LIST) and full-text indexes (pipeline).

A build is planned on the driver -- checks (:mod:`.checks`), one pinned version, contiguous row-balanced
fragment groups (:mod:`.groups`), IVF / PQ trained once on a sample (:mod:`.training`) -- its segments are
encoded by tasks, one per group, through the package's task runner (:mod:`.segments`), and the driver commits
them as one index (:mod:`.build`); :mod:`.kind` makes that a job kind (plan document, record, Spark stage,
cancel).  Everything a rerun needs is in the checkpoint store, so a killed build
resumes without rebuilding its finished segments, and an add-only refresh encodes only the fragments the index
does not cover with the saved artifacts.  :mod:`.stats` says what an index covers; :mod:`.upkeep` refreshes a
job's indexes after its commit, retraining only when asked or when :mod:`.drift` measures the new rows drifted.
The traps this avoids are in ``lance.md`` §13 of the project's notes.
"""

from geneva_provider.pipeline.indexes.build import DEFAULT_MAX_SEGMENTS
from geneva_provider.pipeline.indexes.groups import fragment_groups
from geneva_provider.pipeline.indexes.kind import create_index, plan_index, refresh_index, run_index
from geneva_provider.pipeline.indexes.stats import index_stats, list_indices, unindexed_fragments

__all__ = ["DEFAULT_MAX_SEGMENTS", "create_index", "fragment_groups", "index_stats", "list_indices", "plan_index",
           "refresh_index", "run_index", "unindexed_fragments"]

"""Table maintenance jobs that compute nothing: compaction (fragments rewritten on Spark without forcing a
recompute) and the clean-up of a table's checkpoint store."""

"""The column job kinds -- a UDF column's backfill and a view's refresh: values computed per fragment,
checkpointed in batches, written as one column file per fragment and committed with ``DataReplacement``."""

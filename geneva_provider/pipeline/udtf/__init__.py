"""The UDTF job kind -- a chunker's or batch UDTF's view refresh: parents (or partitions) expanded into new
rows, checkpointed, written as new fragments and committed in one ``Update`` with the rows they replace."""

"""What a view records about its source in its own metadata: a query view's (``meta``) and a chunker's or
batch UDTF's view (``udtf_meta``)."""

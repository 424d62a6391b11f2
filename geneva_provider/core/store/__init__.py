"""The checkpoint store (checkpoint files and the object store under them), the one module that knows its
keys (``layout``), and the error store of rows a UDF failed on."""

"""Connect arguments of the real scheduler's SQLite metadata DB (``[database] sql_alchemy_connect_args``).

Four components (api-server, scheduler, dag-processor, triggerer) write one SQLite file.  sqlite3's default busy
timeout is 5 s: on a loaded 2-core machine a component held the lock longer, and the dag-processor and the
triggerer died with "database is locked" in the middle of a test.  They wait for the lock up to a minute instead.
"""

CONNECT_ARGS = {"timeout": 60}
ASYNC_CONNECT_ARGS = {"timeout": 60}

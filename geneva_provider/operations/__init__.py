"""The front door of the pipeline: ``run(db, request)`` and ``submit(db, request)`` for every typed operation of
:mod:`geneva_provider.core.contracts.operations` (backfill, views, columns, indexes, job records), and
``plan(db, request)``: only a job's plan step (the Airflow plan tasks).

The facade (``Table`` / ``Connection``), the CLI, the Lance namespace and the REST server all call it, instead of
reaching into the pipeline's modules.  It sits between the facade and the pipeline: it imports core and pipeline,
never the facade or Airflow.  ``db`` is a :class:`~geneva_provider.core.catalog.Catalog`, or anything holding one
as ``.catalog`` (a facade ``Connection``).
"""

from geneva_provider.operations.background import JobHandle
from geneva_provider.operations.dispatch import confirm, plan, prepare, run, submit

__all__ = ["JobHandle", "confirm", "plan", "prepare", "run", "submit"]

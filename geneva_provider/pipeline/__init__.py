"""The pipeline: the stages of a job and the Spark task runner.

plan (``plan_backfill`` / ``plan_refresh``, sharing ``planning``) -> ``apply`` (reading inputs
through the job-kind registry in ``inputs``) -> ``write`` (+ ``commit``) -> ``verify``; ``jobs``
runs them all in one process.  Stages take a :class:`~geneva_provider.core.refs.TableRef`
and plan documents -- never the ``Table`` facade, never Airflow.
"""

"""The jobs a ``GenevaNamespace`` with ``job_runner=airflow`` submits: one DAG run per request.

The namespace triggers a run through Airflow's REST API with the conf ``{"request": <the operation's JSON>, "db":
..., "db_conn_id": ...}`` (``geneva_provider.core.contracts.operations.RemoteJob``, sent by
``geneva_provider.namespace.runners.AirflowRunner``); the run's id is the job id the namespace returns.  The
request's ``id`` names the table: its name alone for a table of the database's root, its namespace path then its
name (``["team_a", "docs"]``) for one of a child namespace, which every task opens there, as the namespace's
in-process runner does.  ``route`` reads the request's ``op`` and picks its stages, each a task retried on its own, as
the task groups wire them:

* ``backfill_column`` (a UDF column) and ``refresh_materialized_view`` (a query view, a chunker or a batch-UDTF
  view): plan -> Spark apply -> Spark write+commit -> verify, then the index stage (plan_indexes -> Spark index,
  mapped over the indexes to refresh), which ``indexes_wanted`` skips when the request says
  ``refresh_indexes: false``;
* ``create_index`` (a vector, scalar or full-text index, ``create_index`` / ``create_scalar_index`` of the
  namespace): the index plan -> the Spark index build.

The plan task takes the whole request (``request=``): every option it carries -- ``where``, checkpoint and task
sizes, ``num_frags``, ``read_version``, ``src_version``, ``num_partitions``, ``num_sub_vectors`` ... -- reaches the
plan exactly as the in-process path passes it (``geneva_provider.operations.plan``).  A request these stages cannot
carry -- another op, a database or a database connection other than the one this DAG's tasks use, a child
namespace that does not exist -- fails ``route``, naming it, before anything runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.indexes import (
    GenevaCreateIndexOperator,
    GenevaPlanIndexRefreshesOperator,
    GenevaSparkIndexOperator,
)
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.views import GenevaPlanRefreshOperator

REQUEST = "{{ dag_run.conf['request'] }}"
# the request's id is the table's namespace path, then its name: the one place a child namespace is named
TABLE = "{{ dag_run.conf['request']['id'][-1] }}"
NAMESPACE = "{{ dag_run.conf['request']['id'][:-1] }}"
STAGES = {"backfill_column": "backfill", "refresh_materialized_view": "refresh", "create_index": "index"}

with DAG(
    dag_id="geneva_namespace_jobs",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # the request renders as the dict it is, not its text
    tags=["geneva", "example", "namespace"],
):

    @task.branch(task_id="route")
    def route(**context: Any) -> str:
        from geneva_provider.core.contracts.operations import RemoteJob
        from geneva_provider.core.errors import InvalidArgumentError

        job = RemoteJob.of(context["dag_run"].conf or {}, "geneva_namespace_jobs")
        if job.db_conn_id not in (None, LanceHook.default_conn_name):
            raise InvalidArgumentError(f"geneva_namespace_jobs: db_conn_id {job.db_conn_id!r} is not carried: "
                                       f"this DAG's tasks run on connection {LanceHook.default_conn_name!r}")
        if job.db:  # the namespace's root: the database the connection names, or the job would run elsewhere
            from geneva_provider.core.catalog import absolute_uri

            served = LanceHook().database.uri
            if absolute_uri(job.db) != served:
                raise InvalidArgumentError(f"geneva_namespace_jobs: db {job.db!r} is not carried: this DAG's "
                                           f"tasks run on the database of connection "
                                           f"{LanceHook.default_conn_name!r}, {served!r}")
        if job.namespace:  # a table of a child namespace: found there now, or nothing runs
            LanceHook().catalog_for(job.request.id).ref(job.request.table)
        return f"{STAGES[job.request.op]}_plan"

    @task.short_circuit(trigger_rule="none_failed_min_one_success")
    def indexes_wanted(**context: Any) -> bool:
        """The request's ``refresh_indexes`` (default true): False skips the index stage after it."""
        from geneva_provider.core.contracts.operations import RemoteJob

        request = RemoteJob.of(context["dag_run"].conf, "geneva_namespace_jobs").request
        return getattr(request, "refresh_indexes", True) is not False

    routed = route()
    jobs = [
        GenevaPlanBackfillOperator(task_id="backfill_plan", request=REQUEST),
        GenevaPlanRefreshOperator(task_id="refresh_plan", request=REQUEST),
    ]
    for plan in jobs:
        prefix = plan.task_id.removesuffix("_plan")
        apply = GenevaSparkApplyOperator(task_id=f"{prefix}_apply", plan=plan.output)
        write = GenevaSparkWriteCommitOperator(task_id=f"{prefix}_write_commit", plan=plan.output,
                                               trigger_rule="none_failed_min_one_success")
        verify = GenevaVerifyOperator(task_id=f"{prefix}_verify", plan=plan.output,
                                      trigger_rule="none_failed_min_one_success")
        routed >> plan >> apply >> write >> verify
        plan >> [write, verify]
        # the index stage of the job (request refresh_indexes, default true): the indexes on what it wrote
        wanted = indexes_wanted.override(task_id=f"{prefix}_indexes_wanted")()
        plan_indexes = GenevaPlanIndexRefreshesOperator(
            task_id=f"{prefix}_plan_indexes", table=TABLE, namespace=NAMESPACE,
            column="{{ dag_run.conf['request'].get('column') }}")
        [plan, verify] >> wanted >> plan_indexes
        GenevaSparkIndexOperator.partial(task_id=f"{prefix}_index").expand(plan=plan_indexes.output)

    index_plan = GenevaCreateIndexOperator(task_id="index_plan", request=REQUEST)
    routed >> index_plan >> GenevaSparkIndexOperator(task_id="index_build", plan=index_plan.output)

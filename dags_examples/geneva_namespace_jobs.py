"""The jobs a ``GenevaNamespace`` with ``job_runner=airflow`` submits: one DAG run per request.

The namespace triggers a run through Airflow's REST API with the conf ``{"request": <the operation's JSON>,
"db_conn_id": ...}`` (``geneva_provider.namespace.runners.AirflowRunner``); the run's id is the job id the
namespace returns.  ``route`` reads the request and picks its stages -- a backfill (``backfill_column``) or a view
refresh (``refresh_materialized_view``): plan -> Spark apply -> Spark write+commit -> verify, each a task retried
on its own, as the backfill and refresh task groups wire them.  A request these stages cannot carry as given (a
tuning option other than ``where``, another database connection) fails ``route``, before anything runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from geneva_provider.hooks.lance import LanceHook
from geneva_provider.operators.backfill import GenevaPlanBackfillOperator, GenevaVerifyOperator
from geneva_provider.operators.spark import GenevaSparkApplyOperator, GenevaSparkWriteCommitOperator
from geneva_provider.operators.views import GenevaPlanRefreshOperator

REQUEST = "dag_run.conf['request']"
STAGES = {"backfill_column": "backfill_plan", "refresh_materialized_view": "refresh_plan"}
CARRIED = {"op", "id", "column", "where", "refresh_indexes"}

with DAG(
    dag_id="geneva_namespace_jobs",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # a request's where: None stays None
    tags=["geneva", "example", "namespace"],
):

    @task.branch(task_id="route")
    def route(**context: Any) -> str:
        from geneva_provider.core.errors import InvalidArgumentError

        conf = context["dag_run"].conf or {}
        request = conf.get("request") or {}
        if request.get("op") not in STAGES:
            raise InvalidArgumentError(f"geneva_namespace_jobs: the request's op must be one of {sorted(STAGES)}, got "
                                       f"{request.get('op')!r}")
        if conf.get("db_conn_id") not in (None, LanceHook.default_conn_name):
            raise InvalidArgumentError(f"geneva_namespace_jobs: runs on connection {LanceHook.default_conn_name!r}, "
                                       f"not {conf['db_conn_id']!r}")
        extra = sorted(k for k, v in request.items() if k not in CARRIED and v is not None)
        if extra:
            raise InvalidArgumentError(f"geneva_namespace_jobs: options {extra} of the request are not carried by "
                                       "this DAG's stages; send the request without them")
        return STAGES[request["op"]]

    routed = route()
    plans = [
        GenevaPlanBackfillOperator(task_id="backfill_plan", table=f"{{{{ {REQUEST}['id'][-1] }}}}",
                                   column=f"{{{{ {REQUEST}['column'] }}}}", where=f"{{{{ {REQUEST}.get('where') }}}}"),
        GenevaPlanRefreshOperator(task_id="refresh_plan", view=f"{{{{ {REQUEST}['id'][-1] }}}}"),
    ]
    for plan in plans:
        prefix = plan.task_id.removesuffix("_plan")
        apply = GenevaSparkApplyOperator(task_id=f"{prefix}_apply", plan=plan.output)
        write = GenevaSparkWriteCommitOperator(task_id=f"{prefix}_write_commit", plan=plan.output,
                                               trigger_rule="none_failed_min_one_success")
        verify = GenevaVerifyOperator(task_id=f"{prefix}_verify", plan=plan.output,
                                      trigger_rule="none_failed_min_one_success")
        routed >> plan >> apply >> write >> verify
        plan >> [write, verify]

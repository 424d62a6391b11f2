"""Extra links of the package's tasks in the Airflow UI: the job record ("Geneva job") and the stage's Spark UI.

As in the Databricks provider, the operator pushes the URL to XCom while it runs and the link reads it
back for the task instance it is asked about (``get_link(operator, ti_key=...)``): Airflow calls
``get_link`` on the worker as the task ends and keeps its answer for the UI, so it must be cheap.
Neither URL carries a credential: the job record's names the job, its table and the ``lance``
connection id, and the plugin (:mod:`geneva_provider.plugin`) serving it looks the connection up itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

JOB_LINK_KEY = "geneva_job_url"        # the XCom holding the task's job record URL
SPARK_UI_KEY = "geneva_spark_ui_url"   # the XCom holding the stage's Spark UI URL
JOBS_PATH = "/geneva/jobs"             # where the plugin serves job records on the api-server


NAMESPACE_DELIMITER = "$"              # joins a child namespace's levels in a link, as the Lance REST spec does


def job_record_url(job_id: str, table: str, lance_conn_id: str, namespace: Sequence[str] = ()) -> str:
    """The address of a job's record on the api-server (``[api] base_url``, else a path the UI resolves); a table of
    a child namespace (``["team_a"]``) is named with it."""
    from airflow.sdk import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    query = {"table": table, "conn": lance_conn_id}
    if namespace:
        query["namespace"] = NAMESPACE_DELIMITER.join(namespace)
    return f"{base}{JOBS_PATH}/{quote(job_id, safe='')}?{urlencode(query)}"


def push_job_link(context: Any, job_id: str, table: str, lance_conn_id: str, namespace: Sequence[str] = ()) -> None:
    """Keeps the job record's URL for the task's "Geneva job" link (nothing outside a task run)."""
    ti = context.get("ti") if context else None
    if ti is not None:
        ti.xcom_push(key=JOB_LINK_KEY, value=job_record_url(job_id, table, lance_conn_id, namespace))


def push_spark_ui_link(context: Any, url: str | None) -> None:
    """Keeps the stage's Spark UI URL for the task's "Spark UI" link (nothing without a UI or a task run)."""
    ti = context.get("ti") if context else None
    if ti is not None and url:
        ti.xcom_push(key=SPARK_UI_KEY, value=url)


def _pushed(ti_key: TaskInstanceKey, key: str) -> str:
    from airflow.sdk.execution_time.xcom import XCom

    value = XCom.get_value(ti_key=ti_key, key=key)
    return str(value) if value else ""


class GenevaJobLink(BaseOperatorLink):
    """The task's job record (status, rows planned / checkpointed / committed, error) on the api-server."""

    name = "Geneva job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _pushed(ti_key, JOB_LINK_KEY)


class SparkUILink(BaseOperatorLink):
    """The Spark application UI of the stage's driver (a classic driver's, or the Spark Connect server's)."""

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _pushed(ti_key, SPARK_UI_KEY)

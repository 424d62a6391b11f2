"""The package's Airflow plugin: job records on the api-server, where the tasks' "Geneva job" link points.

``GET /geneva/jobs/<job id>?table=<table>&conn=<lance connection id>`` (``&namespace=team_a`` for a table of a
child namespace, its levels joined by ``$``) answers the job's record -- status,
stage, rows planned / checkpointed / ready / committed / failed, versions, error -- as JSON, or as a small
HTML page for a browser.  The api-server reads it from the table's checkpoint store with the ``lance``
connection's storage options, which never leave the server: the record holds none, and the page shows the
record only.  Only users the api-server authenticated may read it (the UI's session, or an API token).
Registered through the provider info (``plugins``), so installing the package is enough.

Every Airflow process that deserializes a DAG loads the plugins (for their operator extra links): ``dags test``,
the scheduler, each task's runner.  So this module imports no FastAPI and builds no app when it loads -- that
took seconds per process (issue 44); the api-server builds the app the first time it reads ``fastapi_apps``.
No ``from __future__ import annotations`` here: FastAPI reads the endpoint's annotations, which are the
objects the builder imported.
"""

import functools
import html
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from geneva_provider.operators.links import JOBS_PATH

JOB_FIELDS = ("job_id", "kind", "table", "column", "status", "stage", "created_at", "updated_at", "finished_at",
              "read_version", "version", "rows_planned", "rows_checkpointed", "rows_ready", "rows_committed",
              "rows_failed", "rows_retried", "error", "airflow_run_id", "spark_ui")  # what the page shows


def job_record(job_id: str, table: str, conn: str, namespace: str = "") -> dict[str, Any]:
    """The job's record as the page shows it -- of a table of the database's root, or of child namespace
    ``namespace`` (its levels joined by ``$``); LookupError when the connection, namespace, table or job is
    unknown."""
    from geneva_provider.core.errors import GenevaError
    from geneva_provider.hooks.lance import LanceHook
    from geneva_provider.operators.links import NAMESPACE_DELIMITER
    from geneva_provider.pipeline.stages.job_records import find_record

    table_id = [*(namespace.split(NAMESPACE_DELIMITER) if namespace else []), table]
    try:
        store = LanceHook(conn).catalog_for(table_id).ref(table).checkpoint_store()
    except GenevaError as exc:
        raise LookupError(str(exc)) from exc
    record = find_record(store, job_id)  # a plan with nothing to do links here too
    if record is None:
        raise LookupError(f"table '{table}' has no record of job {job_id!r}")
    fields = record.model_dump(mode="json")
    return {name: fields.get(name) for name in JOB_FIELDS}


@functools.cache
def job_pages_app() -> Any:
    """The FastAPI app of the job record pages (built once, when the api-server mounts it)."""
    from airflow.api_fastapi.core_api.security import requires_authenticated
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import HTMLResponse, JSONResponse, Response

    app = FastAPI(title="Geneva jobs", dependencies=[Depends(requires_authenticated())])

    @app.get("/jobs/{job_id}")
    def get_job(job_id: str, table: str, conn: str, request: Request, namespace: str = "") -> Response:
        try:
            fields = job_record(job_id, table, conn, namespace)
        except LookupError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        if "text/html" not in request.headers.get("accept", ""):
            return JSONResponse(fields)
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape('' if v is None else str(v))}</td></tr>"
                       for k, v in fields.items())
        return HTMLResponse(f"<!doctype html><title>Geneva job {html.escape(job_id)}</title>"
                            f"<h1>Geneva job {html.escape(job_id)}</h1><table>{rows}</table>")

    return app


class GenevaPlugin(AirflowPlugin):
    """Mounts the job record pages on the api-server at ``/geneva``."""

    name = "geneva"

    @property
    def fastapi_apps(self) -> list[Any]:  # type: ignore[override] - AirflowPlugin's list, built when read
        """The api-server reads the app from the plugin it loaded (an instance): built then, not at import."""
        return [{"app": job_pages_app(), "url_prefix": JOBS_PATH.rsplit("/", 1)[0], "name": "Geneva jobs"}]

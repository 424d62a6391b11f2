"""A job's skip limits: past them, rows the error policy skipped fail the job (their values stay checkpointed)."""

from __future__ import annotations

from geneva_provider.core.contracts.models import JobPlan
from geneva_provider.core.errors import UDFExecutionError


def check_skip_limits(plan: JobPlan, failed: int) -> None:
    """Fails the job when the UDF skipped more rows than its policy allows (the values stay checkpointed)."""
    over = []
    if plan.max_failed_rows is not None and failed > plan.max_failed_rows:
        over.append(f"max_rows={plan.max_failed_rows}")
    # The fraction is of the table's rows, so a rerun that only retries the failed rows is held to
    # the same bar as the run that failed on them.
    if plan.max_failed_fraction is not None and failed > plan.max_failed_fraction * plan.rows_total:
        over.append(f"max_fraction={plan.max_failed_fraction} of the table's {plan.rows_total} rows")
    if over:
        raise UDFExecutionError(
            f"{plan.label()}: the UDF failed on {failed} rows, more than its skip policy allows ({', '.join(over)}); "
            f"the failed rows are in the error store (job {plan.job_id}); nothing was committed")

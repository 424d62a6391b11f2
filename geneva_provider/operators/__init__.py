"""Operators: one pipeline stage per Airflow task (plan, Spark apply, Spark write+commit, verify, views)."""

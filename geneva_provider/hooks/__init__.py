"""Hooks: ``LanceHook`` turns a ``lance`` Airflow connection into a database of Lance tables."""

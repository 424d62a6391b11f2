"""The core: plain data and Lance facts, shared by every layer above.

Table references and the catalog, the UDF spec and its codec, checkpoint keys and stores,
range maths, job options, the typed stage contracts (plan, task, summary, results) and view
metadata.  Nothing here imports the pipeline, the facade or Airflow.
"""

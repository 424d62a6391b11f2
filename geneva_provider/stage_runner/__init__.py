"""Running one Spark stage of a plan outside any scheduler: the Spark Connect stage backend and the stand-alone
stage runner (a stage in a process of its own, holding a lease in the checkpoint store), with the progress lines
they log.  Below the Airflow surface, so that a service runs stages as the operators do; what reads Airflow's
configuration (the Spark connection, the log folder) stays in :mod:`geneva_provider.operators` and is passed in.
"""

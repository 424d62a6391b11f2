"""The stages every job kind runs through: the kind registry and the generic apply, write+commit and verify drivers.

A driver holds what every kind shares (the job record, the Spark stage around the work, the error
store, counts, progress, worker deaths, skip limits); what differs by kind is asked of the kind's
:class:`~geneva_provider.pipeline.stages.kinds.JobKindSpec`.
"""

"""The typed contracts that cross processes and stages: plans and results (``models``), job kinds and stages,
a job's options, and the error payload a failed stage leaves."""

"""Where the pipeline meets Spark: the local session and the task runner, Spark Connect, a stage run on a
caller's session, task resources (GPUs, CPUs, memory), worker deaths explained and pinned source versions."""

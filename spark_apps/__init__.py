"""spark-submit programs: parse arguments, build the session, call one stage of the stage registry.

Shipped inside the wheel as ``geneva_provider.spark_apps``; :func:`app_path` gives the
file to hand to ``spark-submit``.  Each program is one line, ``run_stage(Stage.APPLY)``: the
registry (``geneva_provider.pipeline.stages.registry``) says what it runs.
"""

from __future__ import annotations

from pathlib import Path


def app_path(name: str) -> str:
    """Absolute path of the spark-submit program of the Spark stage ``name`` (a ``Stage``: 'apply', ...)."""
    from geneva_provider.pipeline.stages.registry import spark_stage

    path = Path(__file__).with_name(f"{spark_stage(name).program}.py")
    if not path.is_file():
        raise FileNotFoundError(f"no spark app named {name!r} at {path}")
    return str(path)

"""spark-submit programs: parse arguments, build the session, call one core stage.

Shipped inside the wheel as ``geneva_provider.spark_apps``; :func:`app_path` gives the
file to hand to ``spark-submit``.
"""

from __future__ import annotations

from pathlib import Path


def app_path(name: str) -> str:
    """Absolute path of the spark-submit program ``name`` ('apply' or 'write_commit')."""
    path = Path(__file__).with_name(f"{name}.py")
    if not path.is_file():
        raise FileNotFoundError(f"no spark app named {name!r} at {path}")
    return str(path)

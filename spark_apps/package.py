"""The zip of the installed ``geneva_provider`` (pure Python) that ``--py-files`` ships to executors.

Here, beside the programs it carries, and not in the Airflow surface that submits it: building it
must not import Airflow, which creates ``$AIRFLOW_HOME`` (``~/airflow``) as it loads -- ``make py-files``
(``python -m geneva_provider.spark_apps.package dist/geneva_provider.zip``) runs it on machines
with no Airflow set up.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path


def package_zip(target: str | os.PathLike[str] | None = None) -> str:
    """Writes the zip to ``target`` and returns its path; it appears whole (written beside it, then renamed).

    Without ``target``: this user's zip of these very sources in the temp dir, named by the package's version and
    a digest of its files' paths, sizes and modification times -- built once, then found again by every stage of
    every job (a Spark Connect session's artifact, a spark-submit's ``--py-files``) until a source file changes.
    Its bytes are the same each time, so the session marker that decides whether a resumed session needs it
    shipped again (:func:`geneva_provider.pipeline.spark.connect.connect_session`) holds across builds too.
    """
    import hashlib

    import geneva_provider

    files = _sources(Path(geneva_provider.__file__).parent)
    if target is None:
        digest = hashlib.sha256()
        for path, name in files:
            stat = path.stat()
            digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        out = Path(tempfile.gettempdir()) / (f"geneva_provider-{geneva_provider.__version__}-{os.getuid()}-"
                                             f"{digest.hexdigest()[:16]}.zip")
        if out.is_file():
            return str(out)
    else:
        out = Path(target)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in files:
            zf.write(path, name)
    os.replace(tmp, out)
    return str(out)


def _sources(package: Path) -> list[tuple[Path, str]]:
    """The package's Python files and their names in the zip (the stages' programs under ``spark_apps/``)."""
    from geneva_provider.core.contracts.kinds import Stage
    from geneva_provider.spark_apps import app_path

    apps = Path(app_path(Stage.APPLY)).parent  # packaged inside geneva_provider, or spark_apps/ in a source tree
    files = [(path, f"geneva_provider/{path.relative_to(package)}") for path in sorted(package.rglob("*.py"))
             if apps not in path.parents]
    return files + [(path, f"geneva_provider/spark_apps/{path.name}") for path in sorted(apps.glob("*.py"))]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m geneva_provider.spark_apps.package DEST.zip")
    print(package_zip(sys.argv[1]))

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
    """Writes the zip to ``target`` (default: this user's one in the temp dir, rebuilt each time) and returns its
    path; it appears whole (written beside it, then renamed)."""
    import geneva_provider
    from geneva_provider.core.contracts.kinds import Stage
    from geneva_provider.spark_apps import app_path

    out = Path(target) if target is not None else \
        Path(tempfile.gettempdir()) / f"geneva_provider-{geneva_provider.__version__}-{os.getuid()}.zip"
    package = Path(geneva_provider.__file__).parent
    apps = Path(app_path(Stage.APPLY)).parent  # packaged inside geneva_provider, or spark_apps/ in a source tree
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*.py")):
            if apps not in path.parents:
                zf.write(path, f"geneva_provider/{path.relative_to(package)}")
        for path in sorted(apps.glob("*.py")):
            zf.write(path, f"geneva_provider/spark_apps/{path.name}")
    os.replace(tmp, out)
    return str(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m geneva_provider.spark_apps.package DEST.zip")
    print(package_zip(sys.argv[1]))

"""What a user sees around the package's work, and where its by-products land (issue 42, row 14).

* Building the package (``pip install -e .``, ``python -m build``) prints no setuptools deprecation block.
* ``make py-files`` writes the zip and nothing under ``$HOME`` (no ``~/airflow`` made by importing Airflow).
* A local Spark session the package starts -- a backfill, a compaction -- prints no JVM start-up banner,
  while the Spark warnings and errors that matter still reach stderr.

Whole programs in their own processes: pip with its isolated build, make, Python driving a real local Spark.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _sources(dest: Path) -> Path:
    """A copy of what a build reads, so the build leaves nothing (egg-info, build/) in the work tree."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    for name in ("geneva_provider", "spark_apps"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_building_the_package_prints_no_deprecation(tmp_path):
    """pip builds the metadata in its isolated environment (the newest setuptools the constraint allows): the
    license is an SPDX expression, so no "project.license as a TOML table is deprecated" block is printed."""
    src = _sources(tmp_path / "src")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--dry-run", "--ignore-installed",
                           "-v", str(src)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Would install airflow-provider-geneva" in out, out[-3000:]
    assert "deprecat" not in out.lower(), out


def test_make_py_files_writes_the_zip_and_nothing_under_home(tmp_path):
    """``make py-files`` (the Makefile's own recipe) on a machine with no Airflow set up: the zip lands in dist/,
    imports on its own, and $HOME holds nothing afterwards (no ~/airflow made by importing Airflow)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    # The recipe as the Makefile has it, run from another directory (so dist/ is made there): the virtualenv's
    # interpreter given, its install stamp taken as up to date.
    proc = subprocess.run(["make", "-f", str(ROOT / "Makefile"), "-o", ".venv/.installed", f"PY={sys.executable}",
                           "py-files"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "py-files: dist/geneva_provider.zip" in proc.stdout
    assert sorted(p.name for p in home.iterdir()) == [], sorted(str(p) for p in home.rglob("*"))
    zipped = work / "dist" / "geneva_provider.zip"
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import geneva_provider.spark_apps as a, "
             "geneva_provider.core.contracts.models; print(a.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(zipped)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().startswith(str(zipped)), out.stderr[-2000:]

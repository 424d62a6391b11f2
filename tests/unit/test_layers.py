"""The package's shape: layers pointing down, Airflow only in the Airflow surface, a light provider.

`make check` holds the real tree to these contracts (ruff, lint-imports, deptry, mypy, out of pytest); the
tests here prove each check bites by breaking a copy of the tree, and check what no linter does (import
circles, a light provider, lazy public names).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HEAVY = ("lance", "lance_namespace", "pyarrow", "numpy", "pandas", "pyspark")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(BIN / "lint-imports"), "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "geneva_provider", tree / "geneva_provider", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.mark.parametrize(("module", "code", "broken"), [
    # A lazy import of the facade from the core: the kind of circle the layers rule out.
    ("core/refs.py", "def _table():\n    from geneva_provider.facade.table import Table\n    return Table\n",
     "geneva_provider.core.refs -> geneva_provider.facade.table"),
    # A stage reaching for Airflow.
    ("pipeline/stages/verify.py", "def _op():\n    from airflow.sdk import BaseOperator\n    return BaseOperator\n",
     "geneva_provider.pipeline.stages.verify -> airflow"),
    # The pipeline importing the Airflow surface.
    ("pipeline/stages/apply.py",
     "def _hook():\n    from geneva_provider.hooks.lance import LanceHook\n    return LanceHook\n",
     "geneva_provider.pipeline.stages.apply -> geneva_provider.hooks.lance"),
    # One job kind using another's code: the kinds are independent folders.
    ("pipeline/udtf/expand.py",
     "def _plan():\n    from geneva_provider.pipeline.columns.compute import ColumnExecutor\n"
     "    return ColumnExecutor\n",
     "geneva_provider.pipeline.udtf.expand -> geneva_provider.pipeline.columns.compute"),
    # A generic stage driver reaching into a kind (it asks the registry instead).
    ("pipeline/stages/apply.py",
     "def _kind():\n    from geneva_provider.pipeline.udtf.kind import UDTF\n    return UDTF\n",
     "geneva_provider.pipeline.stages.apply -> geneva_provider.pipeline.udtf.kind"),
])
def test_import_contracts_fail_when_an_arrow_points_up(tmp_path, module, code, broken):
    tree = copy_tree(tmp_path)
    with open(tree / "geneva_provider" / module, "a") as f:
        f.write("\n\n" + code)
    proc = lint_imports(tree)
    assert proc.returncode != 0
    assert broken in " ".join(proc.stdout.split()), proc.stdout[-3000:]  # lint-imports wraps long lines


def import_circles(tree: Path) -> list[list[str]]:
    """Circles of imports between the package's modules (lazy imports count; ``if TYPE_CHECKING:`` ones do not).

    The layers contract cannot see a circle inside one layer (``facade.query`` <-> ``facade.table``).
    """
    root = tree / "geneva_provider"
    modules = {".".join(p.relative_to(tree).with_suffix("").parts).removesuffix(".__init__"): p
               for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        todo = list(ast.parse(path.read_text()).body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                todo.extend(node.orelse)
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                todo.extend(ast.iter_child_nodes(node))
                continue
            # ``from pkg import sub`` runs both pkg/__init__ and pkg/sub: an edge to each
            edges.update(t for t in targets if t in modules and t not in ("geneva_provider", name))
        graph[name] = edges

    circles, seen = [], set()
    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    circles.append(path)
            elif nxt not in path and nxt > start:  # each circle found once, from its smallest module
                walk(start, nxt, [*path, nxt])
    for start in sorted(graph):
        walk(start, start, [start])
    return circles


def test_no_modules_import_each_other_in_a_circle(tmp_path):
    assert import_circles(ROOT) == []
    tree = copy_tree(tmp_path)  # proved to bite: a lazy import back from the facade's table to its query
    query = tree / "geneva_provider" / "facade" / "query.py"
    query.write_text(query.read_text() + "\n\ndef _t():\n    from geneva_provider.facade.table import Table\n"
                     "    return Table\n")
    assert import_circles(tree) == [["geneva_provider.facade.query", "geneva_provider.facade.table"]]


def test_ruff_bans_airflow_below_the_surface_and_heavy_imports_in_it(tmp_path):
    tree = copy_tree(tmp_path)
    (tree / "geneva_provider" / "pipeline" / "leak.py").write_text(
        '"""A stage that imports Airflow."""\n\nfrom airflow.sdk import BaseOperator\n\n__all__ = ["BaseOperator"]\n')
    (tree / "geneva_provider" / "operators" / "heavy.py").write_text(
        '"""An operator module that imports lance at module level."""\n\nimport lance\n\n__all__ = ["lance"]\n')
    proc = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "--output-format", "concise", "."], cwd=tree,
                          capture_output=True, text=True, timeout=120)
    assert "geneva_provider/pipeline/leak.py:3:1: TID251" in proc.stdout, proc.stdout
    assert "geneva_provider/operators/heavy.py:3:8: TID253" in proc.stdout, proc.stdout
    assert proc.stdout.count("TID25") == 2, proc.stdout


def test_airflow_loads_the_provider_and_example_dags_without_heavy_imports(tmp_path):
    """What the scheduler, dag-processor and triggerer import: the entry point, hooks, operators,
    sensors, triggers, task groups and the DAG files -- none of lance, pyarrow, numpy, pyspark."""
    script = textwrap.dedent(f"""
        import glob, importlib, importlib.util, json, os, sys
        from airflow.providers_manager import ProvidersManager
        pm = ProvidersManager()
        pm.initialize_providers_list()
        pm.initialize_providers_hooks()
        info = pm.providers["airflow-provider-geneva"].data
        assert pm.hooks["lance"].hook_class_name == "geneva_provider.hooks.lance.LanceHook"
        modules = ["geneva_provider.task_groups", "geneva_provider.assets", "geneva_provider.openlineage"]
        for section in ("hooks", "operators", "sensors", "triggers"):
            modules += [m for entry in info[section] for m in entry["python-modules"]]
        for m in modules:
            importlib.import_module(m)
        for path in sorted(glob.glob({str(ROOT / "dags_examples" / "*.py")!r})):
            spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        print(json.dumps({{"modules": modules, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "geneva_provider.operators.spark" in out["modules"] and "geneva_provider.sensors.table" in out["modules"]
    assert out["heavy"] == []


def test_public_names_are_loaded_on_first_use():
    import geneva_provider as gp

    assert set(gp.__all__) == {*gp._EXPORTS, "__version__"}
    for name in gp._EXPORTS:
        assert getattr(gp, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = gp.nope


def check_deps(tree: Path) -> subprocess.CompletedProcess:
    """`make check-deps` on ``tree`` with this venv (``-o``: its set-up is taken as done)."""
    venv = BIN.parent
    return subprocess.run(["make", "-s", "-C", str(tree), "check-deps", f"VENV={venv}", "-o", f"{venv}/.installed"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("edit", "found"), [
    # The core using a module that only Airflow brings along: `pip install airflow-provider-geneva` breaks.
    (("pyproject.toml", '    "tenacity>=8.2",\n', ""),
     "DEP003 'tenacity' imported but it is a transitive dependency"),
    # The core importing what only the `airflow` extra declares.
    (("geneva_provider/pipeline/stages/verify.py", "from __future__ import annotations\n",
      "from __future__ import annotations\n\nimport pendulum  # noqa: F401\n"),
     "DEP004 'pendulum' imported but declared as a dev dependency"),
])
def test_the_dependency_check_fails_on_an_undeclared_or_extra_only_import_in_the_core(tmp_path, edit, found):
    tree = copy_tree(tmp_path)
    shutil.copytree(ROOT / "spark_apps", tree / "spark_apps", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "Makefile", tree / "Makefile")
    path, old, new = edit
    text = (tree / path).read_text()
    assert old in text
    (tree / path).write_text(text.replace(old, new, 1))
    proc = check_deps(tree)
    assert proc.returncode != 0
    assert found in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_every_package_on_disk_is_shipped_in_the_wheel():
    """`[tool.setuptools] packages` is a list: a new sub-package missing from it installs without its code."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "geneva_provider").rglob("__init__.py")}
    on_disk |= {"geneva_provider.spark_apps"} if (ROOT / "spark_apps" / "__init__.py").exists() else set()
    missing = on_disk - listed
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {sorted(missing)}"
    assert not listed - on_disk, f"listed but not on disk: {sorted(listed - on_disk)}"

"""A screenshot of the watcher-driven chunk-view -> embedding DAG's Graph view in the real Airflow UI
(docs/images/on-change-dag-graph.png, in docs/airflow.md's "Event-driven pipelines").

It starts a real Airflow (``airflow db migrate``, then an api-server and a dag-processor, on SQLite in a temp dir,
the api-server on 127.0.0.1 at a free port, the simple auth manager with every user an admin so no login page)
whose DAG folder holds only ``dags_examples/on_change_chunks_embeddings.py``, waits until the dag-processor has
serialized the DAG, opens its Graph view in headless Chromium with both task groups expanded, waits for the
graph's nodes to be drawn and takes the screenshot.  No scheduler, no triggerer and no database of tables: the
picture shows the DAG's shape (the watched Asset, the refresh and embedding task groups), not a run.

What it needs (the ``screenshots`` extra, and a Chromium that is not downloaded by Playwright)::

    pip install -e '.[airflow,screenshots]'
    apt-get install -y chromium         # /usr/bin/chromium; do not run `playwright install`

How to run it, from the repository root (about a minute; it writes one PNG)::

    python docs/screenshots/dag_graph_screenshot.py [--chromium /usr/bin/chromium] [--out docs/images]

The Airflow processes and the browser are stopped and the temp dir removed whatever happens.  Nothing reaches
the network beyond 127.0.0.1: the api-server serves the UI itself.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Any

from headless import chromium, free_port  # beside this script

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DAG_FILE = REPO / "dags_examples" / "on_change_chunks_embeddings.py"
DAG_ID = "geneva_on_change_chunks_embeddings"
GROUPS = ["refresh_chunks", "embed_chunks"]  # the task groups shown expanded
AIRFLOW = Path(sys.executable).parent / "airflow"
SERVER_SECONDS = 180.0  # the api-server's start and the DAG's first parse, on a busy machine
GRAPH_SECONDS = 60.0


def environment(workdir: Path, port: int) -> dict[str, str]:
    """The components' environment: Airflow kept in ``workdir``, nothing inherited of a user's Airflow set-up."""
    keep = {k: os.environ[k] for k in ("HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER") if k in os.environ}
    url = f"http://127.0.0.1:{port}"
    return {
        **keep,
        "PATH": f"{AIRFLOW.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "AIRFLOW_HOME": str(workdir / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(workdir / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{workdir / 'home' / 'airflow.db'}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(workdir / "logs"),
        "AIRFLOW__LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(workdir / "logs" / "dag_processor"),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(24),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
    }


def start_airflow(workdir: Path, env: dict[str, str], port: int) -> list[subprocess.Popen[bytes]]:
    """``airflow db migrate``, then the api-server and the dag-processor, each in its own process group."""
    for d in ("home", "dags", "logs"):
        (workdir / d).mkdir()
    shutil.copy(DAG_FILE, workdir / "dags" / DAG_FILE.name)
    subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, cwd=workdir, check=True, timeout=300,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    commands = {"api-server": ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                "dag-processor": ["dag-processor"]}
    procs = []
    for name, args in commands.items():
        with (workdir / f"{name}.log").open("wb") as log:
            procs.append(subprocess.Popen([str(AIRFLOW), *args], env=env, cwd=workdir, stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
    return procs


def wait_for_dag(procs: list[subprocess.Popen[bytes]], base: str) -> None:
    """Returns once the api-server answers for the DAG (the dag-processor has serialized it); raises if a
    component exits or the DAG does not appear in time."""
    deadline = time.monotonic() + SERVER_SECONDS
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(proc.args[:2])} exited with {proc.returncode}")  # type: ignore[index]
        with suppress(OSError, KeyError, ValueError):
            token = _token(base)
            request = urllib.request.Request(f"{base}/api/v2/dags/{DAG_ID}/details",
                                             headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=5) as answer:
                if answer.status == 200 and json.load(answer)["dag_id"] == DAG_ID:
                    return
        time.sleep(1.0)
    raise TimeoutError(f"DAG {DAG_ID} did not appear on {base} within {SERVER_SECONDS:.0f}s")


def _token(base: str) -> str:
    """A REST API token: with every user an admin, the simple auth manager hands one out without a password."""
    with urllib.request.urlopen(f"{base}/auth/token", timeout=5) as answer:
        return str(json.load(answer)["access_token"])


def stop_airflow(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each component's process group, SIGKILL what is left after 30 s."""
    for proc in procs:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def take_screenshot(base: str, chromium_path: str, out: Path, profile: Path) -> Path:
    """Opens the DAG's Graph view (groups expanded, set the way the UI keeps them: in local storage) and shoots
    the graph once every task's node is drawn."""
    shot = out / "on-change-dag-graph.png"
    # The Graph view, both groups open, and the DAG's "immediate" dependencies: the watched Asset it is scheduled on.
    storage = {"default_dag_view": json.dumps("graph"), f"{DAG_ID}/open-groups": json.dumps(GROUPS),
               f"dependencies-{DAG_ID}": json.dumps("immediate")}
    with chromium(chromium_path, profile, "dag-graph-screenshot-failed.png", viewport={"width": 1900, "height": 700},
                  color_scheme="light", device_scale_factor=2) as browser:
        browser.add_init_script(f"for (const [k, v] of Object.entries({json.dumps(storage)})) "
                                "localStorage.setItem(k, v);")
        page = browser.new_page()
        page.goto(f"{base}/dags/{DAG_ID}")
        graph = page.locator(".react-flow")
        graph.wait_for(timeout=GRAPH_SECONDS * 1000)
        # Every task of both groups and the watched Asset are drawn (a node names them), then the layout settles.
        for task in ("plan", "apply", "write_commit", "verify", "chunks_refreshed", "lance.lance_default.articles"):
            graph.get_by_text(task, exact=True).first.wait_for(timeout=GRAPH_SECONDS * 1000)
        page.wait_for_timeout(2_000)
        _fit(page)
        page.screenshot(path=shot, clip=_around(page.locator(".react-flow__node")))
    return shot


def _fit(page: Any) -> None:
    """React Flow's own "fit view" control, so the whole graph is in the picture."""
    button = page.locator(".react-flow__controls-fitview")
    if button.count():
        button.first.click()
        page.wait_for_timeout(1_000)


def _around(nodes: Any, margin: float = 24.0) -> dict[str, float]:
    """The page area holding every node of the graph, with a margin (the picture leaves out the empty canvas)."""
    boxes = [box for box in (nodes.nth(i).bounding_box() for i in range(nodes.count())) if box]
    left, top = min(b["x"] for b in boxes) - margin, min(b["y"] for b in boxes) - margin
    right = max(b["x"] + b["width"] for b in boxes) + margin
    bottom = max(b["y"] + b["height"] for b in boxes) + margin
    return {"x": max(left, 0.0), "y": max(top, 0.0), "width": right - max(left, 0.0), "height": bottom - max(top, 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium to drive (not downloaded)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="where the PNG goes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    workdir = Path(tempfile.mkdtemp(prefix="geneva-dag-graph-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs = start_airflow(workdir, environment(workdir, port), port)
        wait_for_dag(procs, base)
        print(take_screenshot(base, args.chromium, args.out, workdir / "chromium-profile"))
    except BaseException:
        for log in sorted(workdir.glob("*.log")):
            print(f"----- {log.name}\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        raise
    finally:
        stop_airflow(procs)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Screenshots of a backfill's progress widget in a real Jupyter notebook (docs/images/progress-jupyter*.png).

Runs ``progress.ipynb`` (beside this script) in a real JupyterLab server with headless Chromium, so the
pictures in docs/progress.md show what a user sees, not a mock-up: the package's own ``tqdm.auto`` widget,
drawn by JupyterLab's widget manager, while the backfill runs and once it is done.

What it needs (the ``screenshots`` extra, and a Chromium that is not downloaded by Playwright)::

    pip install -e '.[screenshots]'     # jupyterlab, ipykernel, ipywidgets, playwright
    apt-get install -y chromium         # /usr/bin/chromium; do not run `playwright install`

How to run it, from the repository root (about a minute; it writes two PNGs)::

    python docs/screenshots/progress_screenshot.py [--chromium /usr/bin/chromium] [--out docs/images]

It copies the notebook into a temp dir, starts ``jupyter lab`` there on 127.0.0.1 (a free port, a random
token, the kernel of this Python with PYTHONPATH set to the repository root so the kernel imports
``geneva_provider`` from this source tree), opens the notebook in headless Chromium, runs all cells, and
takes a screenshot of the backfill's cell while its bar is partly filled with rows, rate and ETA
(``progress-jupyter.png``) and another once the job has returned (``progress-jupyter-done.png``).  The
server, its kernel and the browser are stopped and the temp dir removed whatever happens.  Nothing here
reaches the network beyond 127.0.0.1: JupyterLab serves the widget JavaScript itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
NOTEBOOK = HERE / "progress.ipynb"
# tqdm's text beside the bar mid-run: "6.00k/20.0k [00:05<00:09, 1.20krows/s, apply]"
MID_RUN = re.compile(r"\d[\d.]*k?/20\.0k \[\d\d:\d\d<\d\d:\d\d, [\d.]+k?rows/s")
# JupyterLab's settings for the run: no "Jupyter news?" toast, no "Select Kernel" dialog.
SETTINGS = {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
            "notebook-extension/tracker": {"autoStartDefaultKernel": True}}
SERVER_SECONDS = 60.0
RUN_SECONDS = 120.0


def start_server(workdir: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    """``jupyter lab`` serving ``workdir/notebooks`` on 127.0.0.1, its config and settings kept in ``workdir``."""
    settings = workdir / "settings"
    for plugin, values in SETTINGS.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               JUPYTER_CONFIG_DIR=str(workdir / "config"), JUPYTER_RUNTIME_DIR=str(workdir / "runtime"))
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={workdir / 'notebooks'}", f"--LabApp.user_settings_dir={settings}",
               f"--LabApp.workspaces_dir={workdir / 'workspaces'}", "--LabApp.extension_manager=readonly"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # a container's root: Jupyter refuses it unless told
        command.append("--allow-root")
    log = (workdir / "server.log").open("wb")
    return subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_for_server(server: subprocess.Popen[bytes], base: str, token: str) -> None:
    """Returns once the server answers its status API; raises if it exits or does not answer in time."""
    deadline = time.monotonic() + SERVER_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.returncode} before it answered")
        with suppress(OSError):
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as answer:
                if answer.status == 200:
                    return
        time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer on {base} within {SERVER_SECONDS:.0f}s")


def start_kernel(base: str, token: str, notebook: str) -> None:
    """Starts the notebook's session and kernel through the REST API, before the page opens.

    JupyterLab then joins this kernel (the page waits until it is idle); left to start one itself on opening
    the page, it sometimes replaced it with a second one just after, and the cells queued on the first were lost.
    """
    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    body = json.dumps({"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": "python3"}})
    request = urllib.request.Request(f"{base}/api/sessions", data=body.encode(), headers=headers, method="POST")
    urllib.request.urlopen(request, timeout=30).close()


def stop_server(server: subprocess.Popen[bytes], base: str, token: str) -> None:
    """Asks the server to shut down (it stops its kernels), then ends its process group if it is still there."""
    with suppress(OSError):
        request = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST", data=b"")
        urllib.request.urlopen(request, timeout=5).close()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)


def take_screenshots(url: str, chromium_path: str, out: Path, profile: Path) -> list[Path]:
    """Opens the notebook, runs all cells and shoots the backfill's cell mid-run and once done."""
    shots: list[Path] = []
    with chromium(chromium_path, profile, "progress-screenshot-failed.png",
                  viewport={"width": 1100, "height": 900}) as browser:
        page = browser.new_page()
        page.goto(url)
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
        _start_kernel(page)
        _run_all_cells(page)
        cell = page.locator(".jp-CodeCell").filter(has=page.locator(".widget-hprogress"))
        cell.wait_for(timeout=RUN_SECONDS * 1000)
        page.locator(".jp-MarkdownCell").first.click()  # the shots show no cell as selected
        deadline = time.monotonic() + RUN_SECONDS
        while not (MID_RUN.search(_text(cell)) and 0.3 <= _filled(cell) <= 0.7):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the widget never showed a partly filled bar: {_text(cell)!r}")
            page.wait_for_timeout(200)
        print("mid-run:", _text(cell))
        shots.append(out / "progress-jupyter.png")
        cell.screenshot(path=shots[-1])

        # Done: the cell has run (its prompt shows a number) and its result is printed.
        cell.locator(".jp-OutputArea-executeResult").wait_for(timeout=RUN_SECONDS * 1000)
        print("done:", _text(cell))
        shots.append(out / "progress-jupyter-done.png")
        cell.screenshot(path=shots[-1])
    return shots


def _start_kernel(page: Any) -> None:
    """Waits for the notebook's kernel, answering JupyterLab's "Select Kernel" dialog if it asks."""
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    ask = page.locator(".jp-Dialog").get_by_role("button", name="Select", exact=True)
    deadline = time.monotonic() + SERVER_SECONDS
    while not idle.is_visible() or ask.is_visible():
        if ask.is_visible():
            ask.click()
        if time.monotonic() > deadline:
            raise TimeoutError("the notebook's kernel did not start")
        page.wait_for_timeout(250)


def _run_all_cells(page: Any) -> None:
    """Run > Run All Cells; asked again unless every code cell was queued (a click can be lost while the page
    settles)."""
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt")
    for _ in range(3):
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(text.strip() != "[ ]:" for text in prompts.all_inner_texts()):
                return
            page.wait_for_timeout(250)
    raise TimeoutError(f"Run All Cells did not queue every code cell: {prompts.all_inner_texts()}")


def _text(cell: Any) -> str:
    """The text beside the widget's bar, with tqdm's figure spaces as plain spaces."""
    return str(cell.locator(".widget-html-content").last.inner_text()).replace("\u2007", " ")


def _filled(cell: Any) -> float:
    """How much of the widget's bar is filled (0..1), read from the bar's own style."""
    width = cell.locator(".widget-hprogress .progress-bar").evaluate(
        "el => el.getBoundingClientRect().width / el.parentElement.getBoundingClientRect().width")
    return float(width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium to drive (not downloaded)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="where the PNGs go")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    workdir = Path(tempfile.mkdtemp(prefix="geneva-screenshot-"))
    server: subprocess.Popen[bytes] | None = None
    port, token = free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    try:
        (workdir / "notebooks").mkdir()
        shutil.copy(NOTEBOOK, workdir / "notebooks" / NOTEBOOK.name)
        server = start_server(workdir, port, token)
        wait_for_server(server, base, token)
        start_kernel(base, token, NOTEBOOK.name)
        shots = take_screenshots(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}", args.chromium, args.out,
                                 workdir / "chromium-profile")
        print(json.dumps([str(path) for path in shots]))
    except BaseException:
        log = workdir / "server.log"
        if log.exists():
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        if server is not None:
            stop_server(server, base, token)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

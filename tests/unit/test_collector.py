"""The first stage of a process freezes what it holds out of full collections -- in a process that runs stages, not in
an interactive one (a notebook, a REPL), whose user data a freeze would keep from ever being collected in a cycle."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, sys
{setup}
from geneva_provider.pipeline.stages.collector import keep_collections_small
keep_collections_small()
keep_collections_small()
print(gc.get_freeze_count())
"""


def _frozen(setup: str) -> int:
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(setup=setup)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_a_stage_process_freezes_its_objects_and_an_interactive_one_does_not():
    assert _frozen("") > 1000  # the imports' objects
    assert _frozen("sys.ps1 = '>>> '") == 0  # a REPL
    assert _frozen("import types; sys.modules['IPython'] = types.ModuleType('IPython')") == 0  # a notebook kernel

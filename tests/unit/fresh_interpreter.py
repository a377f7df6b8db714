"""Runs a script in a new interpreter, for checks that need a process nothing else has touched yet.

pyarrow imports pandas lazily, the first time a process calls ``pa.array`` (even on an ndarray),
``Schema.empty_table()`` and a few other helpers: 0.1-0.3 s and ~40 MB, paid inside whatever call
came first. The client and broker paths build their columns so that it never happens; these tests
hold them to it, and only a fresh interpreter can tell.
"""

from __future__ import annotations

import subprocess
import sys

RUN_TIMEOUT_S = 60


def assert_leaves_pandas_unimported(script: str) -> None:
    """Run ``script``; it must succeed and leave pandas unimported."""
    result = subprocess.run([sys.executable, "-c", script + "\nimport sys\nprint('pandas' in sys.modules)"],
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and lines and lines[-1] == "False", result.stdout + result.stderr

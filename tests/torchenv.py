"""Real torch environments for tests: a venv per torch version, cached, created once per machine.

``torch_python("2.14.1")`` is the CUDA build (cu130 on x86_64, several GB, installed from the
machine's package index/cache); ``torch_python("2.13.0")`` is the CPU build that the machine carries.
A lock file serialises concurrent creators (pytest-xdist, two checkouts on one machine).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from cache import cache_dir  # tests/ is on sys.path (rootdir conftest)


def torch_python(version: str, timeout: int = 3600) -> Path:
    """Path to the python of a venv holding exactly ``torch==version``; created on first use."""
    root = cache_dir("venvs")
    venv = root / f"torch-{version}"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    with open(root / f"torch-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists() and python.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-cache-dir", f"torch=={version}"],
            check=True, timeout=timeout,
        )
        ready.write_text(version + "\n")
    return python

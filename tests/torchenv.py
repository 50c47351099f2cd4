"""Real torch environments for tests: a venv per torch version, cached, created once per machine.

``torch_python("2.14.1")`` is the CUDA build (cu130 on x86_64, several GB) with the files the stable lock
pins; ``torch_python("2.13.0")`` is the CPU build that the machine carries. Both are installed by the
project's pinned uv from the test wheelhouse into a venv, with the shared test uv cache
(``cache.uv_install``): uv hardlinks installed files from its cache, so this venv, the parser venv and
the stacks that tests build from the lock hold one copy of torch and its CUDA libraries on disk, not one
each (a cold CI machine has tens of GB, not hundreds).
A lock file serialises concurrent creators (pytest-xdist, two checkouts on one machine).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from cache import cache_dir, pip_download, uv_install
from lockwheels import fill_from_lock, lock_files

# What is in the venv, and how it was made: a venv made another way is made again.
_RECIPE = "uv-from-wheelhouse-2"


def torch_python(version: str, timeout: int = 3600) -> Path:
    """Path to the python of a venv holding exactly ``torch==version``; created on first use."""
    root = cache_dir("venvs")
    venv = root / f"torch-{version}"
    python = venv / "bin" / "python"
    ready = venv / ".ready"
    with open(root / f"torch-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists() and python.exists() and ready.read_text().split() == [version, _RECIPE]:
            return python
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if version == "2.14.1":  # the stable lock's torch and CUDA libraries, hashed as a stack has them
            fill_from_lock()
            pins = [f"{item['name']}=={item['version']}" for item in lock_files()]
            uv_install(python, [f"torch=={version}"], pins=pins, timeout=timeout)
        else:  # the machine's own file of it, through pip's configuration
            pip_download([f"torch=={version}"])
            uv_install(python, [f"torch=={version}"], timeout=timeout)
        ready.write_text(f"{version} {_RECIPE}\n")
    return python

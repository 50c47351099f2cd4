"""Small real virtual environments for tests (no pip inside: nothing is installed into them)."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path


def make_venv(root: Path, *import_paths: str | Path) -> Path:
    """A venv at ``root`` whose import path also holds ``import_paths`` (a .pth file, as site-packages
    do); its python."""
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    if import_paths:
        (purelib(python) / "sglang_fleet_test.pth").write_text("".join(f"{p}\n" for p in import_paths))
    return python


def purelib(python: str | Path) -> Path:
    """The site-packages directory of ``python``."""
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())

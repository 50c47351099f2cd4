"""Where tests keep what is slow to make and safe to reuse between runs on the same machine.

Everything lives under one directory, ``$SGLANG_FLEET_CACHE`` or ``~/.cache/sglang-fleet`` (outside the
checkout, so a fresh clone in CI still reuses a previous run's downloads and builds on that machine).
Entries are keyed by what produced them (versions, package lists), never trusted blindly: callers
re-create an entry when its key changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename


def cache_root() -> Path:
    root = Path(os.environ.get("SGLANG_FLEET_CACHE") or Path.home() / ".cache" / "sglang-fleet")
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(*parts: str) -> Path:
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def wheelhouse() -> Path:
    """The shared wheel directory (torch, sglang-kernel, nvidia-cuda-* ...) used by tests and the fleet."""
    return cache_dir("wheelhouse")


def _have_wheel(requirement: str, dest: Path) -> bool:
    """``dest`` holds a wheel of exactly ``name==version`` that this interpreter can install."""
    name, sep, version = requirement.partition("==")
    if not sep or not version or any(c in requirement for c in "<>!~;[ @"):
        return False
    ours = set(sys_tags())
    for wheel in dest.glob("*.whl"):
        try:
            wheel_name, wheel_version, _build, tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if (wheel_name == canonicalize_name(name) and str(wheel_version) == version.strip()
                and ours.intersection(tags)):
            return True
    return False


def pip_download(requirements: list[str], dest: Path | None = None, *, deps: bool = False,
                 extra_args: list[str] | None = None, timeout: int = 1800) -> Path:
    """``pip download`` exact requirements (``name==version``) into the wheelhouse.

    No-op (no index is asked) when every requirement is an exact pin whose wheel, installable by this
    interpreter, is already in ``dest`` and neither ``deps`` nor ``extra_args`` (another platform,
    another index) is asked for; otherwise pip runs and reuses what ``dest`` holds.
    Uses the controller's pip configuration (index, mirrors); the repository names no registry host.
    """
    dest = dest or wheelhouse()
    if not deps and not extra_args and all(_have_wheel(r, dest) for r in requirements):
        return dest
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
           "--only-binary=:all:", "--dest", str(dest), *(extra_args or [])]
    if not deps:
        cmd.append("--no-deps")
    subprocess.run([*cmd, *requirements], check=True, timeout=timeout)
    return dest

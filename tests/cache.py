"""Where tests keep what is slow to make and safe to reuse between runs on the same machine.

Everything lives under one directory, ``$SGLANG_FLEET_CACHE`` or ``~/.cache/sglang-fleet`` (outside the
checkout, so a fresh clone in CI still reuses a previous run's downloads and builds on that machine).
Entries are keyed by what produced them (versions, package lists), never trusted blindly: callers
re-create an entry when its key changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
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


@contextlib.contextmanager
def wheelhouse_lock(dest: Path | None = None):
    """Held while wheels are written into ``dest`` (the wheelhouse): under ``pytest -n`` the fleet worker and
    another worker may fill it at once, and one must not read a wheel the other is still writing."""
    dest = dest or wheelhouse()
    with open(dest / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield dest


def uv_cache() -> Path:
    """The uv cache every test venv and every test stack built on this machine shares (``UV_CACHE_DIR``).

    uv hardlinks what it installs from its cache, so one copy of torch's CUDA libraries serves them all.
    """
    return cache_dir("uv")


def uv_install(python: Path, requirements: list[str], *, deps: bool = True, pins: list[str] | None = None,
               timeout: int = 3600) -> None:
    """Install ``requirements`` into the venv of ``python`` with the project's pinned uv, from the
    wheelhouse only (no index), hardlinking from the shared test uv cache.

    With ``pins`` (``name==version`` lines, a lock's), the set is first resolved within those pins with
    every file's sha256 and installed with ``--require-hashes``, as a stack from the lock is: uv keeps a
    wheel unpacked without its hash apart from one unpacked in hash-checking mode, so only a hashed
    install shares the cache's copy with the stacks tests build from the lock.
    """
    uv = Path(sys.executable).parent / "uv"
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    common = ["--no-index", "--find-links", str(wheelhouse()), "--cache-dir", str(uv_cache())]
    install = [str(uv), "pip", "install", "--quiet", "--python", str(python), "--link-mode", "hardlink",
               *common]
    if not deps:
        install.append("--no-deps")
    if pins is None:
        subprocess.run([*install, *requirements], check=True, timeout=timeout, env=env)
        return
    with tempfile.TemporaryDirectory() as tmp:
        constraints, resolved = Path(tmp) / "pins.txt", Path(tmp) / "resolved.txt"
        constraints.write_text("\n".join(pins) + "\n")
        subprocess.run([str(uv), "pip", "compile", "--quiet", "--python", str(python), *common,
                        "--generate-hashes", "--constraint", str(constraints), "--output-file", str(resolved),
                        "-"], input="\n".join(requirements) + "\n", text=True, check=True,
                       timeout=timeout, env=env)
        subprocess.run([*install, "--require-hashes", "--requirement", str(resolved)], check=True,
                       timeout=timeout, env=env)


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
    with wheelhouse_lock(dest):
        subprocess.run([*cmd, *requirements], check=True, timeout=timeout)
    return dest

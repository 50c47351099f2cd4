"""Run a module of library/ in a plain subprocess, the way Ansible runs it on a host, to reach paths that
ansible-runner cannot: as another (non-root) user, or with an unexpected failure injected.

The module gets its arguments on the command line (Ansible's documented way to invoke a module
directly) and finds this checkout's module_utils/ under ``ansible.module_utils``, as in a real run.

Run as another user, the module cannot read this checkout or its venv (a clone under ``mktemp -d`` is
mode 0700, as is /root): like Ansible's AnsiballZ payload, the module, ansible's module_utils and ours
are then staged in a world-readable directory with a stub ``ansible`` package, and run by a system
interpreter that user may execute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import ansible.module_utils

REPO_ROOT = Path(__file__).resolve().parent.parent
INJECTED = "injected failure"

_WRAPPER = r"""
import importlib, runpy, sys
module_path, module_utils, args, fail_in, message = sys.argv[1:6]
if module_utils.startswith("stage:"):
    sys.path.insert(0, module_utils[len("stage:"):])
import ansible.module_utils
if not module_utils.startswith("stage:"):
    ansible.module_utils.__path__.append(module_utils)
if fail_in:
    # An error no real input produces (a bug, a changed dependency): replace one module_utils function.
    name, function = fail_in.rsplit(".", 1)
    def injected(*_args, **_kwargs):
        raise RuntimeError(message)
    setattr(importlib.import_module("ansible.module_utils." + name), function, injected)
sys.argv = [module_path, args]
runpy.run_path(module_path, run_name="__main__")
"""


def run_module_directly(module: str, args: dict, *, user: int | None = None,
                        fail_in: str | None = None) -> tuple[int, dict | None, str]:
    """(exit status, the module's JSON result or None when it printed none, stderr).

    ``user``: run as that uid/gid (needs root, setpriv). ``fail_in``: "module_utils_name.function" to
    replace by a function that raises RuntimeError("injected failure").
    """
    arguments = json.dumps({"ANSIBLE_MODULE_ARGS": args})
    if user is None:
        argv = [sys.executable, "-c", _WRAPPER, str(REPO_ROOT / "library" / f"{module}.py"),
                str(REPO_ROOT / "module_utils"), arguments, fail_in or "", INJECTED]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd="/", check=False)
    else:
        with _staged(module) as (stage, module_path):
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--",
                    system_python(), "-c", _WRAPPER, str(module_path), f"stage:{stage}", arguments,
                    fail_in or "", INJECTED]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd="/", check=False)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = None
    return done.returncode, result, done.stderr


def system_python() -> str:
    """A Python 3 that any user may run: the OS's own, as on a managed host (not a venv under /root)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        mode = os.stat(candidate).st_mode if os.path.exists(candidate) else 0
        if mode & 0o001:
            return candidate
    raise FileNotFoundError("no world-executable python3 in /usr/bin, /usr/local/bin or /bin")


@contextmanager
def _staged(module: str):
    """(stage dir, module path): the module and every module_util it may import, readable by anyone."""
    stage = Path(tempfile.mkdtemp(prefix="sglang-fleet-module-"))
    try:
        package = stage / "ansible"
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(Path(ansible.module_utils.__file__).parent, package / "module_utils", ignore=ignore)
        (package / "__init__.py").write_text("")  # AnsiballZ ships a stub too, not ansible's own
        for source in (REPO_ROOT / "module_utils").glob("*.py"):
            shutil.copy(source, package / "module_utils" / source.name)
        module_path = shutil.copy(REPO_ROOT / "library" / f"{module}.py", stage / f"{module}.py")
        for path in [stage, *stage.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield stage, Path(module_path)
    finally:
        shutil.rmtree(stage)

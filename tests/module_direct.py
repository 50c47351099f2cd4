"""Run a module of library/ in a plain subprocess, the way Ansible runs it on a host, to reach paths that
ansible-runner cannot: as another (non-root) user, or with an unexpected failure injected.

The module gets its arguments on the command line (Ansible's documented way to invoke a module
directly) and finds this checkout's module_utils/ under ``ansible.module_utils``, as in a real run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
INJECTED = "injected failure"

_WRAPPER = r"""
import importlib, runpy, sys
import ansible.module_utils
module_path, module_utils, args, fail_in, message = sys.argv[1:6]
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
    argv = [sys.executable, "-c", _WRAPPER, str(REPO_ROOT / "library" / f"{module}.py"),
            str(REPO_ROOT / "module_utils"), json.dumps({"ANSIBLE_MODULE_ARGS": args}), fail_in or "",
            INJECTED]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd="/", check=False)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = None
    return done.returncode, result, done.stderr

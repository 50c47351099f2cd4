"""Runs a controller-side check module of library/ inside the controller's worker process.

The checks the roles run delegated to the controller (inventory_check, sglang_models_check,
rollout_units, stack_pylock) only compute on their arguments and read controller files. Run as a module,
each costs a module process on the controller per host: the payload written to a temporary directory,
three shells around it, and a Python that imports AnsibleModule's machinery, about 0.3 CPU-seconds
(2026-12-06, 4 hosts, ``inventory_check``: 0.34 CPU-s a host as a module, 0.05 here). This plugin runs
the same module file's ``run(params)`` in the worker that already holds the task, after validating the
arguments against the same ``ARGUMENT_SPEC`` that AnsibleModule uses: one implementation, two ways in.
The results are the module's, less what AnsibleModule adds around any module's: the ``invocation`` echo,
and the attributes (owner, mode, size) of the file a result's ``path`` names, which no role reads.

It runs in-process only where the module would have run on the controller as the controller's user: a
``local`` connection (delegate_to: localhost, or a localhost inventory), without become or async.
Anywhere else, or for a module file without ``run`` and ``ARGUMENT_SPEC``, it is Ansible's own
``normal`` action: the module runs as Ansible always runs it. Each
module named in action_plugins/ is a two-line file that loads this one (Ansible names an action plugin
after its file, and plugin files cannot import each other).
"""

from __future__ import annotations

import importlib.util
import json
import sys

import ansible.module_utils
from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.json import Direction, get_module_encoder
from ansible.plugins.action import ActionBase
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.plugins.loader import module_loader

LOCAL_CONNECTIONS = {"local", "ansible.builtin.local", "ansible.legacy.local"}


def runs_on_controller(transport: str, become: bool) -> bool:
    """Whether the module would run on the controller as the controller's user."""
    return transport in LOCAL_CONNECTIONS and not become


def load_module_file(name: str):
    """library/<name>.py (found where Ansible finds modules) as a Python module, or None."""
    loaded = sys.modules.get(f"sglang_fleet_module_{name}")
    if loaded is not None:
        return loaded
    path = module_loader.find_plugin(name)
    return load_module_file_at(path, name) if path else None


def load_module_file_at(path, name: str):
    """A module file as a Python module, its ``ansible.module_utils`` imports resolved in the configured
    module_utils paths (this checkout's module_utils/), as its AnsiballZ payload resolves them."""
    for directory in C.DEFAULT_MODULE_UTILS_PATH:
        if directory not in ansible.module_utils.__path__:
            ansible.module_utils.__path__.append(directory)
    spec = importlib.util.spec_from_file_location(f"sglang_fleet_module_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module
    return module


def plain(value):
    """The arguments as a module receives them: serialized for a module, then plain JSON types."""
    return json.loads(json.dumps(value, cls=get_module_encoder("legacy", Direction.CONTROLLER_TO_MODULE)))


class ActionModule(NormalAction):
    """Ansible's ``normal`` action (a module process, async, the remote temporary directory removed)
    unless the module can run here, in the worker."""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        name = self._task.action.rpartition(".")[2]
        here = (runs_on_controller(self._connection.transport, self._play_context.become)
                and not self._task.async_val)
        module = load_module_file(name) if here else None
        if module is None or not hasattr(module, "run") or not hasattr(module, "ARGUMENT_SPEC"):
            return super().run(tmp, task_vars)
        result = ActionBase.run(self, tmp, task_vars)
        try:
            _validation, params = self.validate_argument_spec(argument_spec=module.ARGUMENT_SPEC)
        except AnsibleActionFail as exc:  # the module's own message for bad arguments
            result.update(failed=True, msg=exc.message)
            return result
        try:
            result.update(module.run(plain(params)))
        except Exception as exc:  # never a traceback: say what failed, as the module's own handler does
            result.update(failed=True, msg=f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")
        return result

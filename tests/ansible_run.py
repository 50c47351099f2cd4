"""Run this repository's modules and playbooks the way a user does, through ansible-runner.

Results come back per host and per task, so tests assert on real module output (``failed``, ``msg``,
``changed``, returned values) instead of on console text.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class PlayResult:
    rc: int
    status: str
    stdout: str
    # host -> list of task results (event_data["res"] with "task" and "event" added), in order
    results: dict[str, list[dict]] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)

    def task(self, host: str, name: str) -> dict:
        """The last result of task ``name`` on ``host`` (KeyError when it did not run)."""
        for res in reversed(self.results.get(host, [])):
            if res["task"] == name:
                return res
        raise KeyError(f"task {name!r} did not run on {host!r}; ran: "
                       f"{[r['task'] for r in self.results.get(host, [])]}")

    def task_runs(self, name: str) -> dict[str, dict]:
        """{host: last result} of task ``name`` on every host it ran on (run_once tasks: one host)."""
        return {host: res for host, results in self.results.items()
                for res in results if res["task"] == name}


def _env(extra: dict | None) -> dict:
    env = {"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
           "ANSIBLE_LIBRARY": str(REPO_ROOT / "library"),
           "ANSIBLE_MODULE_UTILS": str(REPO_ROOT / "module_utils"),
           "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1"}
    env.update(extra or {})
    return env


def run_playbook(playbook: str | Path | list, inventory: str | Path | None = None, *,
                 extravars: dict | None = None, check: bool = False, limit: str | None = None,
                 envvars: dict | None = None, timeout: int = 1800, cmdline: str = "",
                 on_event: Callable[[dict], None] | None = None) -> PlayResult:
    """Run a playbook (a path, or a list of plays) and collect per-host task results.

    ``on_event``: called with each ansible-runner event as it arrives (e.g. to kill the controller at a
    given task); every event is still kept for the result."""
    inventory = str(inventory or REPO_ROOT / "inventory" / "local")
    with tempfile.TemporaryDirectory(prefix="ansible-runner-") as private:
        if isinstance(playbook, (str, Path)):
            playbook = str(Path(playbook).resolve())
        options = []
        if check:
            options.append("--check")
        if cmdline:
            options.append(cmdline)
        env = _env(envvars)
        runner = ansible_runner.run(
            private_data_dir=private, playbook=playbook, inventory=inventory, extravars=extravars,
            limit=limit, envvars=env, quiet=True, timeout=timeout,
            cmdline=" ".join(options) or None, project_dir=str(REPO_ROOT),
            # ansible-runner replaces ANSIBLE_CACHE_PLUGIN with a jsonfile cache of its own unless told
            # the type: a caller's choice must hold
            fact_cache_type=env.get("ANSIBLE_CACHE_PLUGIN", "jsonfile"),
            event_handler=None if on_event is None else lambda event: on_event(event) or True,
        )
        results: dict[str, list[dict]] = {}
        for event in runner.events:
            data = event.get("event_data", {})
            # per-task results only: a loop's items are inside its runner_on_* result ("results")
            if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped",
                                      "runner_on_unreachable"):
                res = dict(data.get("res", {}))
                res["task"] = data.get("task")
                res["event"] = event["event"]
                results.setdefault(data.get("host"), []).append(res)
        _record_task_times(playbook, runner.events)
        stats = runner.stats or {}
        return PlayResult(rc=runner.rc, status=runner.status, stdout=runner.stdout.read(),
                          results=results, stats=stats)


def run_on_fleet(playbook: str | Path | list, inventory: str | Path, *, envvars: dict | None = None,
                 **kwargs) -> PlayResult:
    """``run_playbook`` against a test fleet's inventory with facts kept in memory only: ansible.cfg caches
    facts on disk (jsonfile, 2 h) keyed by host name, and fleet host names recur from fleet to fleet, so a
    play must never see an earlier fleet's facts."""
    return run_playbook(playbook, inventory, envvars={"ANSIBLE_CACHE_PLUGIN": "memory", **(envvars or {})},
                        **kwargs)


# A host's result of a task, and of each item of a looped task (tests/task_times.py counts them).
RECORDED_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable",
                   "runner_item_on_ok", "runner_item_on_failed", "runner_item_on_skipped")


def _record_task_times(playbook, events) -> None:
    """With SGLANG_TASK_TIMES=FILE set, append one JSON line per host and task (and per loop item): the
    playbook, task, role, action, host, event (runner_on_ok, _failed, _skipped, _unreachable or
    runner_item_on_*), start, end and seconds (ansible-runner's own timestamps), to see where a slow play
    spends its time and how many tasks ran of which kind (``python -m tests.task_times [--census] FILE``)."""
    path = os.environ.get("SGLANG_TASK_TIMES")
    if not path:
        return
    name = playbook if isinstance(playbook, str) else "(inline play)"
    with open(path, "a", encoding="utf-8") as out:
        for event in events:
            data = event.get("event_data", {})
            if event.get("event") in RECORDED_EVENTS:
                out.write(json.dumps({"playbook": name, "task": data.get("task"), "role": data.get("role"),
                                      "action": data.get("resolved_action") or data.get("task_action"),
                                      "host": data.get("host"), "event": event["event"],
                                      "start": data.get("start"), "end": data.get("end"),
                                      "seconds": data.get("duration")}) + "\n")


def run_module(module: str, args: dict | None = None, *, check: bool = False,
               host: str = "localhost", inventory: str | Path | None = None,
               envvars: dict | None = None) -> dict:
    """Run one module on one host (default: this machine) and return its result dict."""
    play = [{"hosts": host, "gather_facts": False,
             "tasks": [{"name": "module under test", module: args or {}}]}]
    result = run_playbook(play, inventory, check=check, envvars=envvars)
    return result.task(host, "module under test")


# ansible-runner looks ansible-playbook up on PATH: use the one next to this interpreter (.venv/bin).
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

"""Run this repository's modules and playbooks the way a user does, through ansible-runner.

Results come back per host and per task, so tests assert on real module output (``failed``, ``msg``,
``changed``, returned values) instead of on console text.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
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


# Where every playbook the tests run finds the module payloads an earlier one built
# (tests/callback_plugins/shared_payload_cache.py).
PAYLOAD_CACHE = REPO_ROOT / ".cache" / "ansiballz"


def prune_payload_cache(root: Path = PAYLOAD_CACHE, max_age: float = 86400.0) -> list[Path]:
    """Remove the payload cache's keys (one per state of the module sources) unused for ``max_age``
    seconds: each edit of a module or module_utils file makes a new one. Returns what was removed."""
    removed = []
    now = time.time()
    for key in sorted(root.iterdir()) if root.is_dir() else ():
        if key.is_dir() and now - key.stat().st_mtime > max_age:
            shutil.rmtree(key, ignore_errors=True)
            removed.append(key)
    return removed


def _env(extra: dict | None) -> dict:
    env = {"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
           "ANSIBLE_LIBRARY": str(REPO_ROOT / "library"),
           "ANSIBLE_MODULE_UTILS": str(REPO_ROOT / "module_utils"),
           "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_PLUGINS": str(REPO_ROOT / "tests" / "callback_plugins"),
           "ANSIBLE_CALLBACKS_ENABLED": "shared_payload_cache",
           "SGLANG_TEST_PAYLOAD_CACHE": str(PAYLOAD_CACHE)}
    env.update(extra or {})
    return env


# What a PlayResult is made of: each host's result of a task (a loop's items are inside it, "results"),
# and the play's stats, with the keys ansible-runner's own ``Runner.stats`` gives.
RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
STATS_KEYS = ("skipped", "ok", "dark", "failures", "ignored", "rescued", "processed", "changed")


# A host's result of a task, and of each item of a looped task (tests/task_times.py counts them).
RECORDED_EVENTS = (*RESULT_EVENTS, "runner_item_on_ok", "runner_item_on_failed", "runner_item_on_skipped")
KEPT_EVENTS = frozenset((*RECORDED_EVENTS, "playbook_on_stats"))


def run_playbook(playbook: str | Path | list, inventory: str | Path | None = None, *,
                 extravars: dict | None = None, check: bool = False, limit: str | None = None,
                 envvars: dict | None = None, timeout: int = 1800, cmdline: str = "",
                 on_event: Callable[[dict], None] | None = None) -> PlayResult:
    """Run a playbook (a path, or a list of plays) and collect per-host task results.

    ``on_event``: called with each ansible-runner event as it arrives (e.g. to kill the controller at a
    given task). Only the events a result is made of are kept (KEPT_EVENTS: each host's task and loop
    item results, the play's stats): ansible-runner writes each kept event to a file and reads them all
    back, and the others (a task's start, each host's start, each include) are about half of a play's."""
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

        def keep(event: dict) -> bool:
            if on_event is not None:
                on_event(event)
            return event.get("event") in KEPT_EVENTS

        runner = ansible_runner.run(
            private_data_dir=private, playbook=playbook, inventory=inventory, extravars=extravars,
            limit=limit, envvars=env, quiet=True, timeout=timeout,
            cmdline=" ".join(options) or None, project_dir=str(REPO_ROOT),
            # ansible-runner replaces ANSIBLE_CACHE_PLUGIN with a jsonfile cache of its own unless told
            # the type: a caller's choice must hold
            fact_cache_type=env.get("ANSIBLE_CACHE_PLUGIN", "jsonfile"),
            event_handler=keep,
        )
        events = list(runner.events)  # each reading of runner.events (and of runner.stats) loads every file
        results: dict[str, list[dict]] = {}
        stats: dict = {}
        for event in events:
            data = event.get("event_data", {})
            # per-task results only: a loop's items are inside its runner_on_* result ("results")
            if event.get("event") in RESULT_EVENTS:
                res = dict(data.get("res", {}))
                res["task"] = data.get("task")
                res["event"] = event["event"]
                results.setdefault(data.get("host"), []).append(res)
            elif event.get("event") == "playbook_on_stats":
                stats = {key: data.get(key, {}) for key in STATS_KEYS}
        _record_task_times(playbook, events)
        return PlayResult(rc=runner.rc, status=runner.status, stdout=runner.stdout.read(),
                          results=results, stats=stats)


def run_on_fleet(playbook: str | Path | list, inventory: str | Path, *, envvars: dict | None = None,
                 **kwargs) -> PlayResult:
    """``run_playbook`` against a test fleet's inventory with facts kept in memory only: ansible.cfg caches
    facts on disk (jsonfile, 2 h) keyed by host name, and fleet host names recur from fleet to fleet, so a
    play must never see an earlier fleet's facts."""
    return run_playbook(playbook, inventory, envvars={"ANSIBLE_CACHE_PLUGIN": "memory", **(envvars or {})},
                        **kwargs)


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

"""Where a play's time went: ``python -m tests.task_times FILE [N]`` reads the JSON lines that
``run_playbook`` appends with SGLANG_TASK_TIMES=FILE set and prints the N tasks (default 25) that took
the longest wall time (first start to last end over the hosts a task ran on), per playbook run order.

``python -m tests.task_times --census FILE [N]`` counts what ran instead: host-tasks (one per host and
task, each a worker process forked by ansible-playbook) skipped, run on the controller only (actions
that never start a module: set_fact, assert, include_role ...) and run as a module (on the host, or on
the controller where delegated), with loop items, and the N most frequent of each kind. Those counts,
not the wall times, say where a CPU-bound run spends its CPU: a module run costs about 0.2 s of CPU,
a forked task with no module about 0.02-0.03 s (measured here, 2026-12-05).
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from datetime import datetime

HOST_TASK_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
# Actions that run in the forked worker on the controller and never start a module.
CONTROLLER_ONLY = frozenset(f"ansible.builtin.{name}" for name in (
    "add_host", "assert", "debug", "fail", "group_by", "import_role", "import_tasks", "include_role",
    "include_tasks", "include_vars", "meta", "set_fact", "set_stats", "validate_argument_spec"))


def _event(record: dict) -> str:
    return record.get("event", "runner_on_ok")  # lines written before events were recorded: results only


def spans(lines) -> dict[tuple[str, str], float]:
    """{(playbook, task): wall seconds summed over its runs}; one run = the task's results that overlap."""
    by_task: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for line in lines:
        record = json.loads(line)
        if _event(record) not in ("runner_on_ok", "runner_on_failed") or not record.get("start") \
                or not record.get("end"):
            continue
        start = datetime.fromisoformat(record["start"]).timestamp()
        end = datetime.fromisoformat(record["end"]).timestamp()
        by_task[(record["playbook"].rsplit("/", 1)[-1], record["task"])].append((start, end))
    total = {}
    for key, intervals in by_task.items():
        intervals.sort()
        seconds, current_start, current_end = 0.0, *intervals[0]
        for start, end in intervals[1:]:
            if start > current_end:
                seconds += current_end - current_start
                current_start, current_end = start, end
            else:
                current_end = max(current_end, end)
        total[key] = seconds + current_end - current_start
    return total


def census(lines) -> dict:
    """Counts of host-tasks by kind ("skipped", "controller", "module"), of loop items, and per kind a
    Counter of (role, task, action)."""
    kinds = {"skipped": Counter(), "controller": Counter(), "module": Counter()}
    items = 0
    for line in lines:
        record = json.loads(line)
        event = _event(record)
        if event.startswith("runner_item_on_"):
            items += 1
            continue
        if event not in HOST_TASK_EVENTS:
            continue
        kind = ("skipped" if event == "runner_on_skipped"
                else "controller" if record.get("action") in CONTROLLER_ONLY else "module")
        kinds[kind][(record.get("role") or "-", record["task"], record.get("action") or "?")] += 1
    return {"host_tasks": sum(sum(c.values()) for c in kinds.values()), "items": items, **kinds}


def print_census(counts: dict, top: int) -> None:
    print(f"{counts['host_tasks']} host-tasks: {sum(counts['skipped'].values())} skipped, "
          f"{sum(counts['controller'].values())} on the controller only, "
          f"{sum(counts['module'].values())} as a module; {counts['items']} loop items")
    for kind in ("module", "controller", "skipped"):
        print(f"\nmost frequent, {kind}:")
        for (role, task, action), count in counts[kind].most_common(top):
            print(f"{count:6d}  {role:16s} {task}  [{action}]")


def main(argv: list[str]) -> int:
    as_census = bool(argv) and argv[0] == "--census"
    if as_census:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    count = int(argv[1]) if len(argv) > 1 else 25
    with open(argv[0], encoding="utf-8") as handle:
        if as_census:
            print_census(census(handle), count)
            return 0
        total = spans(handle)
    for (playbook, task), seconds in sorted(total.items(), key=lambda kv: -kv[1])[:count]:
        print(f"{seconds:8.1f} s  {playbook:24s} {task}")
    print(f"{sum(total.values()):8.1f} s  in all ({len(total)} tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

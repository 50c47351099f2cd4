"""Where a play's time went: ``python -m tests.task_times FILE [N]`` reads the JSON lines that
``run_playbook`` appends with SGLANG_TASK_TIMES=FILE set and prints the N tasks (default 25) that took
the longest wall time (first start to last end over the hosts a task ran on), per playbook run order."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from datetime import datetime


def spans(lines) -> dict[tuple[str, str], float]:
    """{(playbook, task): wall seconds summed over its runs}; one run = the task's results that overlap."""
    by_task: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for line in lines:
        record = json.loads(line)
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


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        total = spans(handle)
    count = int(argv[1]) if len(argv) > 1 else 25
    for (playbook, task), seconds in sorted(total.items(), key=lambda kv: -kv[1])[:count]:
        print(f"{seconds:8.1f} s  {playbook:24s} {task}")
    print(f"{sum(total.values()):8.1f} s  in all ({len(total)} tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""tests/task_times.py and what run_playbook records for it (SGLANG_TASK_TIMES): wall time per task,
and the census of host-tasks by kind that says where a CPU-bound run's CPU goes."""

from __future__ import annotations

import json

import ansible_run
import task_times


def line(event, task, action, *, role="stack", start=None, end=None, host="h1", playbook="p/site.yml"):
    return json.dumps({"playbook": playbook, "task": task, "role": role, "action": action, "host": host,
                       "event": event, "start": start, "end": end, "seconds": None})


LINES = [
    line("runner_on_ok", "Plan", "ansible.builtin.set_fact"),
    line("runner_on_ok", "Plan", "ansible.builtin.set_fact", host="h2"),
    line("runner_on_ok", "Check", "ansible.builtin.assert"),
    line("runner_on_ok", "Install", "ansible.builtin.command"),
    line("runner_on_failed", "Fetch", "stack_fetch_wheels"),
    line("runner_on_unreachable", "Fetch", "stack_fetch_wheels", host="h2"),
    line("runner_on_skipped", "Install", "ansible.builtin.command", host="h2"),
    line("runner_on_skipped", "Check", "ansible.builtin.assert", host="h2"),
    line("runner_item_on_ok", "Dirs", "ansible.builtin.file"),
    line("runner_item_on_skipped", "Dirs", "ansible.builtin.file", host="h2"),
    line("runner_on_ok", "Dirs", "ansible.builtin.file"),
    line("runner_on_async_poll", "Stage", "model_weights"),
]


def test_census_counts_host_tasks_by_kind_and_loop_items_apart():
    counts = task_times.census(LINES)
    assert counts["host_tasks"] == 9  # the items and the async poll are not host-tasks
    assert counts["items"] == 2
    assert sum(counts["skipped"].values()) == 2
    assert counts["controller"] == {("stack", "Plan", "ansible.builtin.set_fact"): 2,
                                    ("stack", "Check", "ansible.builtin.assert"): 1}
    assert counts["module"] == {("stack", "Install", "ansible.builtin.command"): 1,
                                ("stack", "Fetch", "stack_fetch_wheels"): 2,
                                ("stack", "Dirs", "ansible.builtin.file"): 1}


def test_spans_merge_overlapping_results_and_leave_out_skips_items_and_old_lines_count():
    lines = [
        line("runner_on_ok", "T", "ansible.builtin.command",
             start="2026-12-05T10:00:00", end="2026-12-05T10:00:04"),
        line("runner_on_ok", "T", "ansible.builtin.command", host="h2",
             start="2026-12-05T10:00:02", end="2026-12-05T10:00:05"),
        line("runner_on_ok", "T", "ansible.builtin.command", host="h6",  # after a gap of 0.5 s
             start="2026-12-05T10:00:05.500000", end="2026-12-05T10:00:06"),
        line("runner_on_failed", "T", "ansible.builtin.command", host="h3",
             start="2026-12-05T10:01:00", end="2026-12-05T10:01:01"),
        line("runner_on_skipped", "T", "ansible.builtin.command", host="h4",
             start="2026-12-05T10:02:00", end="2026-12-05T10:03:00"),
        line("runner_item_on_ok", "T", "ansible.builtin.command", host="h5",
             start="2026-12-05T10:04:00", end="2026-12-05T10:05:00"),
        # a line written before events were recorded: a result
        json.dumps({"playbook": "p/site.yml", "task": "Old", "start": "2026-12-05T10:00:00",
                    "end": "2026-12-05T10:00:02"}),
    ]
    assert task_times.spans(lines) == {("site.yml", "T"): 6.5, ("site.yml", "Old"): 2.0}


def test_main_prints_the_census_and_refuses_no_file(tmp_path, capsys):
    path = tmp_path / "times.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    assert task_times.main(["--census", str(path), "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("9 host-tasks: 2 skipped, 3 on the controller only, 4 as a module; 2 loop items")
    assert "     2  stack            Fetch  [stack_fetch_wheels]" in out
    assert task_times.main(["--census"]) == 2
    assert task_times.main([]) == 2


def test_run_playbook_records_each_result_and_item_not_the_other_events(tmp_path, monkeypatch):
    path = tmp_path / "times.jsonl"
    monkeypatch.setenv("SGLANG_TASK_TIMES", str(path))
    data = {"task": "Install", "role": "stack", "resolved_action": "ansible.builtin.command", "host": "h1",
            "start": "2026-12-05T10:00:00", "end": "2026-12-05T10:00:01", "duration": 1.0}
    events = [{"event": name, "event_data": data} for name in (
        "playbook_on_start", "runner_on_start", "runner_on_ok", "runner_item_on_ok", "runner_on_skipped",
        "runner_retry", "playbook_on_stats")]
    ansible_run._record_task_times("playbooks/site.yml", events)
    records = [json.loads(text) for text in path.read_text().splitlines()]
    assert [r["event"] for r in records] == ["runner_on_ok", "runner_item_on_ok", "runner_on_skipped"]
    assert records[0] == {"playbook": "playbooks/site.yml", "task": "Install", "role": "stack",
                          "action": "ansible.builtin.command", "host": "h1", "event": "runner_on_ok",
                          "start": "2026-12-05T10:00:00", "end": "2026-12-05T10:00:01", "seconds": 1.0}
    monkeypatch.delenv("SGLANG_TASK_TIMES")
    ansible_run._record_task_times("playbooks/site.yml", events)  # off: nothing more written
    assert len(path.read_text().splitlines()) == 3

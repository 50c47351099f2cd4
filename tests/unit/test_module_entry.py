"""module_utils/module_entry.py: the ``main()`` of the modules with two ways in, run in-process as a module
process runs it (AnsibleModule reads its arguments from the bytes a payload hands it, prints one JSON
result and exits)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.module_entry import run_module

SPEC = {"name": {"type": "str", "required": True}, "count": {"type": "int", "default": 2}}


def entry(monkeypatch, capsys, args: dict, run) -> tuple[int, dict]:
    """(exit status, printed result) of ``run_module(SPEC, run)`` given module arguments ``args``."""
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as leaving:
        run_module(SPEC, run)
    return leaving.value.code, json.loads(capsys.readouterr().out)


def test_a_result_leaves_through_exit_json_with_the_validated_parameters(monkeypatch, capsys):
    seen = []

    def run(params):
        seen.append(dict(params))
        return {"changed": False, "answer": params["name"] * params["count"]}

    status, result = entry(monkeypatch, capsys, {"name": "ab", "count": "3"}, run)
    assert status == 0
    assert seen == [{"name": "ab", "count": 3}], "converted by the spec before run() sees them"
    assert result["answer"] == "ababab"
    assert result["changed"] is False
    assert "failed" not in result
    # the spec's default reaches run()
    status, result = entry(monkeypatch, capsys, {"name": "x"}, run)
    assert (status, result["answer"]) == (0, "xx")


def test_failed_leaves_through_fail_json_with_the_message(monkeypatch, capsys):
    status, result = entry(monkeypatch, capsys, {"name": "x"},
                           lambda params: {"failed": True, "msg": "no such host", "problems": ["h1"]})
    assert status == 1
    assert result["failed"] is True
    assert result["msg"] == "no such host"
    assert result["problems"] == ["h1"]


def test_failed_false_is_a_success_without_the_key(monkeypatch, capsys):
    status, result = entry(monkeypatch, capsys, {"name": "x"}, lambda params: {"failed": False, "ok": 1})
    assert status == 0
    assert result["ok"] == 1
    assert "failed" not in result


def test_bad_arguments_fail_before_run(monkeypatch, capsys):
    called = []
    status, result = entry(monkeypatch, capsys, {"count": "many"}, lambda params: called.append(1) or {})
    assert status == 1
    assert result["failed"] is True
    assert "name" in result["msg"]
    assert called == []


def test_check_mode_runs_the_module(monkeypatch, capsys):
    """Every such module only computes and reads: in check mode it runs and answers, not skipped."""
    status, result = entry(monkeypatch, capsys, {"name": "x", "_ansible_check_mode": True},
                           lambda params: {"changed": False, "ran": True})
    assert status == 0
    assert result["ran"] is True
    assert not result.get("skipped")

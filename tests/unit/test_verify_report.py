"""The verify report: summary, ordering, rendering (module_utils/verify_report)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.verify_report import (
    ReportError,
    render_json,
    render_markdown,
    render_table,
    summarize,
)

HOSTS = {
    "gpu-2": [{"check": "drift", "status": "fail", "detail": "six is 1.16.0, the lock has 1.17.0"},
              {"check": "gpu", "status": "skip", "detail": "no GPU"}],
    "gpu-1": [{"check": "zeta", "status": "ok", "detail": ""},
              {"check": "torch", "status": "ok", "detail": "2.14.1 covers 12.0"},
              {"check": "gpu", "status": "ok", "detail": "1 x RTX PRO 6000 | 12.0"}],
}


def test_summary_orders_hosts_and_checks_and_counts():
    report = summarize(HOSTS)
    assert [h["host"] for h in report["hosts"]] == ["gpu-1", "gpu-2"]
    assert [c["check"] for c in report["hosts"][0]["checks"]] == ["gpu", "torch", "zeta"]
    assert [h["status"] for h in report["hosts"]] == ["ok", "fail"]
    assert report["status"] == "fail"
    assert report["counts"] == {"hosts": 2, "passed": 1, "failed": 1}
    assert summarize({"a": [{"check": "gpu", "status": "skip"}]})["status"] == "ok"


@pytest.mark.parametrize("check", [{"check": "gpu", "status": "bad"}, {"status": "ok"}, "text"])
def test_malformed_checks_are_refused(check):
    with pytest.raises(ReportError, match="host h: malformed check"):
        summarize({"h": [check]})


def test_renderings():
    report = summarize(HOSTS)
    table = render_table(report, detail_width=20)
    assert table.splitlines()[0].split() == ["host", "check", "status", "detail"]
    assert "gpu-2  drift  FAIL    six is 1.16.0, the…" in table
    assert table.endswith("1 of 2 hosts passed, 1 failed")
    markdown = render_markdown(report, generated="20261201T000000Z")
    assert "## gpu-2: FAIL" in markdown
    assert "Generated 20261201T000000Z." in markdown
    assert "| gpu | ok | 1 x RTX PRO 6000 / 12.0 |" in markdown  # a pipe cannot break the table
    assert json.loads(render_json(report, generated="x"))["generated"] == "x"

"""module_utils/verify_report: the ``speculative`` check, which carries each drafting model's measured
acceptance length (sglang_spec_acceptance's results) into the verify report."""

from __future__ import annotations

from ansible.module_utils.verify_report import check_order, host_checks, speculative_check, summarize

OK = {"name": "kimi", "status": "ok", "msg": "sglang-kimi: accept length 2.91 ...", "accept_length": 2.91,
      "min_accept_length": 1.8, "draft_model": "org/draft"}
LOW = {"name": "small", "status": "fail", "msg": "sglang-small: speculative accept length 1.20 is below ...",
       "accept_length": 1.2, "min_accept_length": 1.8, "draft_model": ""}
WARNED = dict(LOW, status="warn", msg="sglang-small: warned")
FIGURES = [{"name": "kimi", "accept_length": 2.91, "min_accept_length": 1.8, "draft_model": "org/draft"},
           {"name": "small", "accept_length": 1.2, "min_accept_length": 1.8, "draft_model": ""}]


def test_the_check_sits_after_the_service():
    order = check_order()
    assert order.index("speculative") == order.index("service") + 1
    assert order[-1] == "drift"


def test_all_ok_lists_each_models_figure():
    check = speculative_check([OK, dict(OK, name="b", accept_length=3, draft_model="")])
    assert check == {"check": "speculative", "status": "ok",
                     "detail": "kimi: accept length 2.91 (min 1.8, draft org/draft); "
                               "b: accept length 3 (min 1.8, draft -)",
                     "figures": [FIGURES[0], {"name": "b", "accept_length": 3, "min_accept_length": 1.8,
                                              "draft_model": ""}]}


def test_the_worst_status_wins_and_a_failing_model_says_why():
    check = speculative_check([OK, LOW])
    assert check["status"] == "fail"
    assert check["detail"] == f"kimi: accept length 2.91 (min 1.8, draft org/draft); {LOW['msg']}"
    assert check["figures"] == FIGURES
    assert speculative_check([LOW, OK])["status"] == "fail"
    assert speculative_check([OK, WARNED])["status"] == "warn"
    assert speculative_check([WARNED, OK])["status"] == "warn"
    assert speculative_check([WARNED, LOW])["status"] == "fail"


def test_a_result_without_status_is_a_failure():
    check = speculative_check([OK, {"msg": "bad argument"}])
    assert check["status"] == "fail"
    assert check["detail"].endswith("; bad argument")
    assert check["figures"][1] == {"name": None, "accept_length": None, "min_accept_length": None,
                                   "draft_model": None}


def test_host_checks_carry_the_check_only_with_drafting_models():
    gpu, stack = {"present": False, "reason": "none"}, {"facts": {}}
    assert "speculative" not in [c["check"] for c in host_checks(gpu, stack)]
    assert "speculative" not in [c["check"] for c in host_checks(gpu, stack, speculative=[])]
    checks = host_checks(gpu, stack, speculative=[LOW])
    assert [c for c in checks if c["check"] == "speculative"] == [speculative_check([LOW])]


def test_the_report_keeps_the_figures_and_fails_the_host():
    report = summarize({"h": [speculative_check([OK, LOW]), {"check": "gpu", "status": "ok", "detail": "x"}]})
    host = report["hosts"][0]
    assert host["status"] == "fail"
    assert host["checks"][0] == {"check": "gpu", "status": "ok", "detail": "x", "stage": "driver"}
    assert host["checks"][1]["figures"] == FIGURES
    assert host["checks"][1]["stage"] == "speculative acceptance"
    assert host["fix_first"].startswith("h: fix the speculative acceptance stage first. speculative: ")

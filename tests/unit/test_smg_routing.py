"""module_utils/smg_routing: the gateway's routing check from SMG 1.13.0's own per-worker metrics (the
metric names and labels as the released binary prints them; the fleet test runs the real smg)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from ansible.module_utils.smg_routing import (
    Gateway,
    RoutingError,
    check_routing,
    delta,
    judge,
    snapshot,
    worker_counts,
)

# Lines as smg 1.13.0 prints them (its /metrics after 34 requests, one worker refusing generations).
METRICS = """\
# HELP smg_worker_requests_total Requests dispatched to a worker by worker (URL) and model
# TYPE smg_worker_requests_total counter
smg_worker_cb_outcomes_total{worker="http://127.0.0.1:31001",outcome="success"} 23
smg_worker_cb_outcomes_total{worker="http://127.0.0.1:31002",outcome="failure"} 10
smg_worker_cb_outcomes_total{worker="http://127.0.0.1:31002",outcome="success"} 1
smg_worker_requests_total{worker="http://127.0.0.1:31001",model="/models/stand-in"} 23
smg_worker_requests_total{worker="http://127.0.0.1:31002",model="/models/stand-in"} 11
smg_worker_requests_total{worker="http://127.0.0.1:31002",model="other"} 2
smg_worker_requests_total_extra{worker="http://127.0.0.1:31001"} 99
smg_worker_health{worker="http://127.0.0.1:31001"} 1
smg_http_requests_total{method="POST",path="/generate"} 34
smg_worker_requests_total{model="no-worker-label"} 5
smg_worker_requests_total{worker="http://x:1",model="m"} NaNx
"""
A, B = "http://127.0.0.1:31001", "http://127.0.0.1:31002"
WA, WB = {"id": "a-main", "url": A}, {"id": "b-main", "url": B}


def test_worker_counts_sums_over_other_labels_and_filters_on_match():
    assert worker_counts(METRICS, "smg_worker_requests_total") == {A: 23.0, B: 13.0}
    assert worker_counts(METRICS, "smg_worker_cb_outcomes_total", outcome="success") == {A: 23.0, B: 1.0}
    assert worker_counts(METRICS, "smg_worker_cb_outcomes_total", outcome="failure") == {B: 10.0}
    assert worker_counts(METRICS, "smg_worker_cb_outcomes_total") == {A: 23.0, B: 11.0}
    assert worker_counts(METRICS, "smg_no_such_metric") == {}
    assert worker_counts("", "smg_worker_requests_total") == {}


def test_worker_counts_reads_escaped_label_values():
    text = 'm{worker="http://h:1",model="a \\"quoted\\" name"} 2\nm{worker="http://h:1",model="b"} 3.5\n'
    assert worker_counts(text, "m") == {"http://h:1": 5.5}
    assert worker_counts(text, "m", model='a \\"quoted\\" name') == {"http://h:1": 2.0}


def test_snapshot_and_delta():
    dispatched, succeeded = snapshot(METRICS)
    assert dispatched == {A: 23.0, B: 13.0}
    assert succeeded == {A: 23.0, B: 1.0}
    # a series that appears during the check counts from zero
    assert delta({A: 20.0}, {A: 23.0, B: 2.0}) == {A: 3.0, B: 2.0}
    assert delta({A: 20.0, B: 1.0}, {A: 20.0}) == {A: 0.0}


def test_judge_every_worker_answered():
    ok, message, rows = judge([WA, WB], [], {A: 1, B: 2}, {A: 1, B: 2})
    assert ok is True
    assert message == ""
    assert rows == [{"id": "a-main", "url": A, "in_rotation": True, "dispatched": 1, "succeeded": 1},
                    {"id": "b-main", "url": B, "in_rotation": True, "dispatched": 2, "succeeded": 2}]


def test_judge_names_the_worker_that_got_nothing():
    ok, message, _ = judge([WA, WB], [], {A: 4}, {A: 4})
    assert ok is False
    assert message == f"worker b-main ({B}) got nothing: no request dispatched to it"


def test_judge_a_dispatch_that_never_succeeded_is_nothing():
    ok, message, rows = judge([WA, WB], [], {A: 4, B: 2}, {A: 4})
    assert ok is False
    assert message == f"worker b-main ({B}) got nothing: 2 dispatched, none answered successfully"
    assert rows[1]["dispatched"] == 2
    assert rows[1]["succeeded"] == 0


def test_judge_out_of_rotation_must_get_nothing():
    ok, message, rows = judge([WA], [WB], {A: 2, B: 1}, {A: 2, B: 1})
    assert ok is False
    assert message == f"worker b-main ({B}) is out of rotation but got 1 request(s)"
    assert rows[1] == {"id": "b-main", "url": B, "in_rotation": False, "dispatched": 1, "succeeded": 1}
    ok, message, rows = judge([WA], [WB], {A: 2}, {A: 2})
    assert (ok, message) == (True, "")
    assert rows[1]["dispatched"] == 0


def test_judge_joins_every_problem():
    ok, message, _ = judge([WA], [WB], {B: 1}, {})
    assert ok is False
    assert message == (f"worker a-main ({A}) got nothing: no request dispatched to it; "
                       f"worker b-main ({B}) is out of rotation but got 1 request(s)")


class FakeGateway:
    """A gateway whose router sends request i to ``route(i)`` (a URL, or None: dropped) and whose
    metrics page counts what it sent; ``fails`` URLs answer with failures."""

    def __init__(self, route, fails=(), start=None):
        self.route = route
        self.fails = set(fails)
        self.sent = dict(start or {})
        self.ok = {}
        self.requests = 0
        self.models = []

    def model(self):
        return "the-model"

    def metrics(self):
        lines = [f'smg_worker_requests_total{{worker="{w}",model="m"}} {n}' for w, n in self.sent.items()]
        lines += [f'smg_worker_cb_outcomes_total{{worker="{w}",outcome="success"}} {n}'
                  for w, n in self.ok.items()]
        return "\n".join(lines) + "\n"

    def generate(self, model):
        self.models.append(model)
        url = self.route(self.requests)
        self.requests += 1
        if url is None:
            return
        self.sent[url] = self.sent.get(url, 0) + 1
        if url not in self.fails:
            self.ok[url] = self.ok.get(url, 0) + 1


def test_check_routing_stops_as_soon_as_every_worker_answered():
    gateway = FakeGateway(lambda i: [A, B][i % 2], start={A: 100})
    result = check_routing(gateway, [WA, WB])
    assert result == {"ok": True, "msg": "2 request(s) through the gateway reached every worker in rotation",
                      "requests": 2, "model": "the-model",
                      "workers": [
                          {"id": "a-main", "url": A, "in_rotation": True, "dispatched": 1, "succeeded": 1},
                          {"id": "b-main", "url": B, "in_rotation": True, "dispatched": 1, "succeeded": 1}]}
    assert gateway.models == ["the-model", "the-model"]


def test_check_routing_keeps_sending_rounds_until_the_last_worker_answers():
    # a sticky policy: the first 5 requests all go to A
    gateway = FakeGateway(lambda i: A if i < 5 else B)
    result = check_routing(gateway, [WA, WB], model="given")
    assert result["ok"] is True
    assert result["requests"] == 6
    assert gateway.models == ["given"] * 6


def test_check_routing_gives_up_after_max_rounds_naming_the_worker():
    gateway = FakeGateway(lambda i: A)
    result = check_routing(gateway, [WA, WB], max_rounds=3)
    assert result["ok"] is False
    assert result["requests"] == 6
    assert result["msg"] == f"after 6 request(s) through the gateway: worker b-main ({B}) got nothing: " \
                            f"no request dispatched to it"


def test_check_routing_stops_at_its_bound():
    ticks = iter(range(0, 1000, 10))
    gateway = FakeGateway(lambda i: A)
    result = check_routing(gateway, [WA, WB], bound=25, clock=lambda: next(ticks))
    # deadline 25: rounds end at clock 10 and 20 (go on), 30 (stop)
    assert result["requests"] == 6
    assert result["ok"] is False


def test_check_routing_a_worker_that_fails_every_request():
    gateway = FakeGateway(lambda i: [A, B][i % 2], fails=[B])
    result = check_routing(gateway, [WA, WB], max_rounds=2)
    assert result["ok"] is False
    assert "worker b-main" in result["msg"]
    assert "2 dispatched, none answered successfully" in result["msg"]


def test_check_routing_a_worker_out_of_rotation_that_still_gets_requests():
    gateway = FakeGateway(lambda i: [A, B][i % 2])
    result = check_routing(gateway, [WA], [WB], max_rounds=2)
    assert result["ok"] is False
    assert result["requests"] == 2
    assert result["msg"].endswith(f"worker b-main ({B}) is out of rotation but got 1 request(s)")


def test_check_routing_needs_a_worker():
    with pytest.raises(RoutingError, match="no worker in rotation"):
        check_routing(FakeGateway(lambda i: A), [])


# --- Gateway: the HTTP side, against a local server playing SMG ---

class SmgPlay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    key = "k"
    models: ClassVar[list] = ["m1"]
    seen: ClassVar[list] = []

    def log_message(self, *args):
        pass

    def _send(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        SmgPlay.seen.append(("GET", self.path, self.headers.get("Authorization"), None))
        if self.path == "/metrics":
            return self._send(200, METRICS)
        if self.path == "/v1/models":
            if self.headers.get("Authorization") != f"Bearer {self.key}":
                return self._send(401, "Missing API key")
            return self._send(200, json.dumps({"data": [{"id": m} for m in self.models]}))
        if self.path == "/badmodels/v1/models":
            return self._send(200, "[]")
        if self.path.startswith("/bad"):
            return self._send(500, "boom")
        return self._send(404, "no")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SmgPlay.seen.append(("POST", self.path, self.headers.get("Authorization"), body))
        return self._send(200 if self.path == "/generate" else 503, "{}")


@pytest.fixture
def smg():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SmgPlay)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    SmgPlay.seen, SmgPlay.models = [], ["m1"]
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_gateway_metrics_without_the_key_and_model_with_it(smg):
    gateway = Gateway(smg + "/", smg + "/metrics", "k", timeout=5)
    assert gateway.url == smg
    assert gateway.metrics() == METRICS
    assert gateway.model() == "m1"
    assert SmgPlay.seen[0][2] is None  # the metrics port needs no key
    assert SmgPlay.seen[1][2] == "Bearer k"


def test_gateway_generate_sends_one_token_distinct_prompts_with_the_key(smg):
    gateway = Gateway(smg, smg + "/metrics", "k", timeout=5)
    gateway.generate("m1")
    gateway.generate("m1")
    (_, path, auth, first), (_, _, _, second) = SmgPlay.seen
    assert (path, auth) == ("/generate", "Bearer k")
    assert first["model"] == "m1"
    assert first["sampling_params"] == {"max_new_tokens": 1, "temperature": 0}
    assert first["text"].endswith(" gateway readiness check")
    assert first["text"] != second["text"]


def test_gateway_without_a_key_sends_no_authorization(smg):
    gateway = Gateway(smg, smg + "/metrics", "", timeout=5)
    with pytest.raises(RoutingError, match=r"/v1/models: HTTP 401: Missing API key"):
        gateway.model()
    assert SmgPlay.seen[0][2] is None


def test_gateway_errors_name_the_url_and_status(smg):
    with pytest.raises(RoutingError, match=r"/bad/metrics: HTTP 500: boom"):
        Gateway(smg, smg + "/bad/metrics").metrics()
    with pytest.raises(RoutingError, match=r"a request through the gateway failed: POST .*/x/generate "
                                           r"-> HTTP 503: \{\}"):
        Gateway(smg + "/x", smg + "/metrics").generate("m")
    with pytest.raises(RoutingError, match=r"/badmodels/v1/models: not a model list: \[\]"):
        Gateway(smg + "/badmodels", smg + "/metrics").model()
    with pytest.raises(RoutingError, match=r"127\.0\.0\.1:9/metrics: .*refused"):
        Gateway(smg, "http://127.0.0.1:9/metrics", timeout=2).metrics()


def test_gateway_model_must_be_one(smg):
    SmgPlay.models = ["m1", "m2"]
    with pytest.raises(RoutingError, match=r"lists 2 models \(m1, m2\); name the one to check"):
        Gateway(smg, smg + "/metrics", "k").model()

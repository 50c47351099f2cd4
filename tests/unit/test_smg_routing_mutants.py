"""module_utils/smg_routing: the details the mutation run (bench/mutation_score.py) found untested.

The Gateway's requests as urllib receives them (urlopen replaced: headers, timeout, the error texts), the
defaults of check_routing, and the metric lines that must be skipped without ending the scan.
"""

from __future__ import annotations

import io
import urllib.error

import pytest
from ansible.module_utils import smg_routing
from ansible.module_utils.smg_routing import Gateway, RoutingError, check_routing, judge, worker_counts

A, B = "http://10.0.0.1:30000", "http://10.0.0.2:30000"
WA, WB = {"id": "a", "url": A}, {"id": "b", "url": B}


def test_worker_counts_skips_bad_lines_and_reads_on():
    text = ('smg_worker_requests_total{model="no-worker-label"} 5\n'
            'smg_worker_requests_total{worker="http://x:1",model="m"} NaNx\n'
            'smg_worker_requests_total{worker="http://x:1",model="other"} 2\n'
            f'smg_worker_requests_total{{worker="{A}",model="m"}} 3\n')
    assert worker_counts(text, "smg_worker_requests_total") == {"http://x:1": 2.0, A: 3.0}
    assert worker_counts(text, "smg_worker_requests_total", model="m") == {A: 3.0}


def test_judge_a_worker_out_of_rotation_with_nothing():
    ok, message, rows = judge([WA], [WB], {A: 2}, {A: 2})
    assert (ok, message) == (True, "")
    assert rows[1] == {"id": "b", "url": B, "in_rotation": False, "dispatched": 0, "succeeded": 0}


class Gw:
    """A gateway that never reaches B, counting its requests."""

    def __init__(self):
        self.sent = 0

    def model(self):
        return "m"

    def metrics(self):
        return f'smg_worker_requests_total{{worker="{A}"}} {self.sent}\n' \
               f'smg_worker_cb_outcomes_total{{worker="{A}",outcome="success"}} {self.sent}\n'

    def generate(self, model):
        self.sent += 1


def test_check_routing_gives_up_after_ten_rounds_by_default():
    result = check_routing(Gw(), [WA, WB])
    assert result["requests"] == 20
    assert result["ok"] is False


@pytest.mark.parametrize(("after", "rounds"), [(119.9, 10), (120.0, 1), (120.5, 1)])
def test_check_routing_stops_at_a_bound_of_120_s_by_default(after, rounds):
    ticks = iter([0.0] + [after] * 20)
    result = check_routing(Gw(), [WA, WB], clock=lambda: next(ticks))
    assert result["requests"] == 2 * rounds


def test_check_routing_without_workers_word_for_word():
    with pytest.raises(RoutingError) as info:
        check_routing(Gw(), [])
    assert str(info.value) == "no worker in rotation: nothing to route to"


class Response:
    def __init__(self, status, body):
        self.status, self.body = status, body

    def read(self):
        return self.body

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def urlopen(monkeypatch):
    """urlopen replaced: answers from ``answers`` (a Response or an exception), requests in ``seen``."""
    state = {"answers": [], "seen": []}

    def fake(request, **kwargs):
        state["seen"].append((request, kwargs))
        answer = state["answers"].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(smg_routing.urllib.request, "urlopen", fake)
    return state


def test_gateway_defaults_and_headers(urlopen):
    gateway = Gateway("http://gw.example:8080/X/", "http://gw.example:9090/metrics")
    assert gateway.url == "http://gw.example:8080/X"
    assert (gateway.api_key, gateway.timeout) == ("", 30.0)
    urlopen["answers"] = [Response(200, b'{"data": [{"id": "m"}]}')]
    assert gateway.model() == "m"
    request, kwargs = urlopen["seen"][0]
    assert kwargs == {"timeout": 30.0}
    assert request.full_url == "http://gw.example:8080/X/v1/models"
    assert request.header_items() == [("Content-type", "application/json")]
    assert request.data is None


def test_gateway_sends_the_key_and_its_timeout(urlopen):
    gateway = Gateway("http://gw", "http://gw:9090/metrics", api_key="k", timeout=2.5)
    urlopen["answers"] = [Response(200, b"{}"), Response(200, b"metrics \xff\n")]
    gateway.generate("m")
    request, kwargs = urlopen["seen"][0]
    assert kwargs == {"timeout": 2.5}
    assert dict(request.header_items()) == {"Content-type": "application/json", "Authorization": "Bearer k"}
    assert gateway.metrics() == "metrics \ufffd\n"
    request, _kwargs = urlopen["seen"][1]
    assert "Authorization" not in dict(request.header_items())


def test_gateway_http_errors_keep_their_body_cut(urlopen):
    gateway = Gateway("http://gw", "http://gw:9090/metrics")
    body = b"\xff" + b"e" * 499

    def error():
        return urllib.error.HTTPError("http://gw", 500, "boom", {}, io.BytesIO(body))

    urlopen["answers"] = [error(), error(), error()]
    with pytest.raises(RoutingError) as info:
        gateway.metrics()
    assert str(info.value) == "http://gw:9090/metrics: HTTP 500: \ufffd" + "e" * 199
    with pytest.raises(RoutingError) as info:
        gateway.model()
    assert str(info.value) == "http://gw/v1/models: HTTP 500: \ufffd" + "e" * 199
    with pytest.raises(RoutingError) as info:
        gateway.generate("m")
    assert str(info.value) == ("a request through the gateway failed: POST http://gw/generate -> HTTP 500: "
                               "\ufffd" + "e" * 299)


def test_gateway_model_list_that_is_not_one_is_cut(urlopen):
    urlopen["answers"] = [Response(200, b"[" + b"x" * 400)]
    with pytest.raises(RoutingError) as info:
        Gateway("http://gw", "m").model()
    assert str(info.value) == "http://gw/v1/models: not a model list: [" + "x" * 199


@pytest.mark.parametrize(("error", "text"), [(urllib.error.URLError("refused"), "refused"),
                                             (ConnectionResetError("reset by peer"), "reset by peer")])
def test_gateway_unreachable_names_the_reason(urlopen, error, text):
    urlopen["answers"] = [error]
    with pytest.raises(RoutingError) as info:
        Gateway("http://gw", "http://gw:9090/metrics").metrics()
    assert str(info.value) == f"http://gw:9090/metrics: {text}"

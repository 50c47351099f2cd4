"""module_utils/sglang_readiness: the cause classifier (from journal lines) and the bounded probe."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from ansible.module_utils.sglang_readiness import classify, probe, wait_ready

LOADED = ["Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=20.1 GB",
          "Memory pool end. avail mem=3.2 GB"]


@pytest.mark.parametrize(("lines", "crashed", "timed_out", "cause"), [
    ([*LOADED, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], True, False, "oom"),
    ([*LOADED, "NVRM: Xid (PCI:0000:18:00): 8, pid=1234, Channel 00000010"], False, True, "driver_hang"),
    ([*LOADED, "[rank1]:[W ProcessGroupNCCL.cpp:1234] Watchdog caught collective operation timeout"],
     False, True, "nccl_pcie_hang"),
    ([*LOADED, "NCCL WARN Call to ibv_reg_mr failed"], False, True, "nccl_pcie_hang"),
    ([*LOADED, "Initialization failed. warmup error: timed out after 600 s"], True, False, "warmup_timeout"),
    ([*LOADED, "flashinfer: compiling batch_decode kernel with nvcc (JIT)"], False, True, "cold_jit"),
    (["error: unrecognized arguments: --cuda-graph-max-bs 8"], True, False, "bad_arguments"),
    (["OSError: /models/x does not appear to have a file named config.json"], True, False, "model_not_found"),
    ([*LOADED, "Traceback (most recent call last):", "RuntimeError: boom"], True, False, "crash"),
    (LOADED, False, True, "hang_after_load"),
    ([], False, False, "unknown"),
])
def test_classify(lines, crashed, timed_out, cause):
    found = classify(lines, crashed=crashed, timed_out=timed_out)
    assert found["cause"] == cause
    assert found["advice"]
    if cause not in ("unknown",):
        assert found["evidence"] == lines[-1].strip()


def test_newest_evidence_wins_within_a_cause_and_specific_causes_first():
    lines = ["compiling kernel (JIT)", "CUDA out of memory", "compiling another (JIT)"]
    assert classify(lines, timed_out=True)["cause"] == "oom"


class _Handler(http.server.BaseHTTPRequestHandler):
    ready_at = 0.0

    def do_GET(self):
        self.send_response(200 if time.monotonic() >= self.ready_at else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


def test_probe_statuses(server):
    url = f"http://127.0.0.1:{server.server_port}/health_generate"
    _Handler.ready_at = time.monotonic() + 3600
    assert probe(url, 2)[0] == 503
    _Handler.ready_at = 0
    assert probe(url, 2) == (200, "ok")
    server_port = server.server_port
    server.shutdown()
    server.server_close()
    status, text = probe(f"http://127.0.0.1:{server_port}/", 2)
    assert status is None
    assert "refused" in text.lower()


def test_wait_ready_is_bounded_and_sees_readiness(server):
    url = f"http://127.0.0.1:{server.server_port}/health_generate"
    _Handler.ready_at = time.monotonic() + 3600
    start = time.monotonic()
    assert wait_ready(url, 1.5, poll=0.2)[0] is False
    assert 1.3 < time.monotonic() - start < 3
    _Handler.ready_at = time.monotonic() + 0.5
    assert wait_ready(url, 5, poll=0.1)[:2] == (True, 200)
    # a dead process ends the wait at once
    _Handler.ready_at = time.monotonic() + 3600
    start = time.monotonic()
    assert wait_ready(url, 10, poll=0.1, alive=lambda: False)[0] is False
    assert time.monotonic() - start < 2


def test_a_port_that_answers_but_not_in_http_is_not_ready():
    import socket  # noqa: PLC0415

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer():
        connection, _ = listener.accept()
        connection.recv(1024)
        connection.sendall(b"SSH-2.0-not-http\r\n")
        connection.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        assert probe(f"http://127.0.0.1:{listener.getsockname()[1]}/health", 2) == (
            None, "not HTTP: BadStatusLine")
    finally:
        listener.close()

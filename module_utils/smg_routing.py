"""The gateway's routing check: real requests through SMG, and proof from SMG's own metrics that every
worker in rotation answered one, and that no worker out of rotation got any.

SMG 1.13.0 counts, on its Prometheus port (``--prometheus-host/--prometheus-port``), per worker URL:

    smg_worker_requests_total{worker="http://10.0.0.1:30000",model="..."}   dispatched, at each send
    smg_worker_cb_outcomes_total{worker="...",outcome="success"|"failure"}   the worker's answer

A worker whose health check passes but whose generations fail (a wrong API key: sglang answers /health
without one) is dispatched to, fails, and SMG retries elsewhere: the client still sees 200. So "reached"
here means a successful outcome, not a dispatch. (Checked against the released 1.13.0 binary.)

Stdlib only, Python 3.8+ (runs on the gateway host).
"""

import json
import re
import time
import urllib.error
import urllib.request
import uuid

REQUESTS = "smg_worker_requests_total"
OUTCOMES = "smg_worker_cb_outcomes_total"

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class RoutingError(Exception):
    pass


def worker_counts(text, name, **match):
    """{worker URL: sum of ``name`` samples} over the samples whose labels include ``match``."""
    counts = {}
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if not sample or sample.group("name") != name:
            continue
        labels = dict(_LABEL.findall(sample.group("labels")))
        if "worker" not in labels or any(labels.get(k) != v for k, v in match.items()):
            continue
        try:
            value = float(sample.group("value"))
        except ValueError:
            continue
        counts[labels["worker"]] = counts.get(labels["worker"], 0.0) + value
    return counts


def snapshot(text):
    """(dispatched, succeeded) per worker URL from one metrics page."""
    return worker_counts(text, REQUESTS), worker_counts(text, OUTCOMES, outcome="success")


def delta(before, after):
    """{worker: after - before} for every worker in ``after`` (a new series counts from 0)."""
    return {w: after[w] - before.get(w, 0.0) for w in after}


def judge(workers, left_out, dispatched, succeeded):
    """(ok, message, per-worker rows) for the workers in rotation and those left out.

    ``workers``/``left_out``: [{"id", "url"}]; ``dispatched``/``succeeded``: deltas by URL.
    """
    rows, missing, leaked = [], [], []
    for worker in workers:
        row = {"id": worker["id"], "url": worker["url"], "in_rotation": True,
               "dispatched": int(dispatched.get(worker["url"], 0)),
               "succeeded": int(succeeded.get(worker["url"], 0))}
        rows.append(row)
        if row["succeeded"] < 1:
            missing.append(row)
    for worker in left_out:
        row = {"id": worker["id"], "url": worker["url"], "in_rotation": False,
               "dispatched": int(dispatched.get(worker["url"], 0)),
               "succeeded": int(succeeded.get(worker["url"], 0))}
        rows.append(row)
        if row["dispatched"] > 0:
            leaked.append(row)
    problems = []
    for row in missing:
        why = (f"{row['dispatched']} dispatched, none answered successfully" if row["dispatched"]
               else "no request dispatched to it")
        problems.append(f"worker {row['id']} ({row['url']}) got nothing: {why}")
    for row in leaked:
        problems.append(f"worker {row['id']} ({row['url']}) is out of rotation but got "
                        f"{row['dispatched']} request(s)")
    return not problems, "; ".join(problems), rows


class Gateway:
    """HTTP to one SMG: its serving port (with the API key) and its metrics port (without)."""

    def __init__(self, url, metrics_url, api_key="", timeout=30.0):
        self.url = url.rstrip("/")
        self.metrics_url = metrics_url
        self.api_key = api_key
        self.timeout = timeout

    def _request(self, url, body=None, auth=True):
        headers = {"Content-Type": "application/json"}
        if auth and self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            raise RoutingError(f"{url}: {getattr(exc, 'reason', exc)}") from None

    def metrics(self):
        status, text = self._request(self.metrics_url, auth=False)
        if status != 200:
            raise RoutingError(f"{self.metrics_url}: HTTP {status}: {text[:200]}")
        return text

    def model(self):
        """The one model the gateway serves (its /v1/models)."""
        status, text = self._request(f"{self.url}/v1/models")
        if status != 200:
            raise RoutingError(f"{self.url}/v1/models: HTTP {status}: {text[:200]}")
        try:
            ids = [m["id"] for m in json.loads(text)["data"]]
        except (ValueError, KeyError, TypeError):
            raise RoutingError(f"{self.url}/v1/models: not a model list: {text[:200]}") from None
        if len(ids) != 1:
            raise RoutingError(f"{self.url}/v1/models lists {len(ids)} models ({', '.join(ids)}); "
                               f"name the one to check")
        return ids[0]

    def generate(self, model):
        """One 1-token generation through the gateway; a distinct prompt each time (no cache affinity)."""
        body = {"model": model, "text": f"{uuid.uuid4().hex} gateway readiness check",
                "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        status, text = self._request(f"{self.url}/generate", body)
        if status != 200:
            raise RoutingError(f"a request through the gateway failed: POST {self.url}/generate "
                               f"-> HTTP {status}: {text[:300]}")


def check_routing(gateway, workers, left_out=(), model="", *, max_rounds=10, bound=120.0,
                  clock=time.monotonic):
    """Send rounds of requests through ``gateway`` until every worker in rotation answered one (or
    ``max_rounds`` rounds / ``bound`` seconds); then judge. Returns a result dict.

    A round is one request per worker, in rotation or not: were a worker left out still in SMG's
    rotation, a round-robin round would reach it.
    """
    if not workers:
        raise RoutingError("no worker in rotation: nothing to route to")
    deadline = clock() + bound
    model = model or gateway.model()
    before = snapshot(gateway.metrics())
    sent, rounds = 0, 0
    while True:
        for _ in range(len(workers) + len(left_out)):
            gateway.generate(model)
            sent += 1
        rounds += 1
        after = snapshot(gateway.metrics())
        dispatched, succeeded = delta(before[0], after[0]), delta(before[1], after[1])
        ok, message, rows = judge(workers, left_out, dispatched, succeeded)
        leaked = any(row["dispatched"] for row in rows if not row["in_rotation"])
        if ok or leaked or rounds >= max_rounds or clock() >= deadline:
            break
    if not ok:
        message = f"after {sent} request(s) through the gateway: {message}"
    return {"ok": ok, "msg": message or f"{sent} request(s) through the gateway reached every worker "
                                       f"in rotation", "requests": sent, "model": model, "workers": rows}

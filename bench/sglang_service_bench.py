"""sglang_service figures from one run on the test fleet (3 hosts, the fleet tests' scenario: stand-in
model servers on hosts 1 and 2, the real smg 1.13.0 gateway on host 3):

1. the readiness gate's detection time for a server that loads and then hangs, against its bound;
2. the gateway's added latency per request over calling a worker directly: median and p99 of a bounded
   loop of sequential /v1/chat/completions from the controller, direct (host 1) vs through smg.

    sudo .venv/bin/python bench/sglang_service_bench.py [--requests 400] [--bound 20]

The stand-in answers at once (no model), so the latency difference is smg's routing plus one more hop
on the fleet's bridge, not a model's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration" / "fleet"))

import ansible.module_utils

ansible.module_utils.__path__.append(str(Path(__file__).resolve().parent.parent / "module_utils"))

from ansible_run import run_playbook  # noqa: E402
from fleet import Fleet  # noqa: E402
from fleet.base import ensure_base  # noqa: E402
from service_stack import API_KEY, GATEWAY_PORT, download_wheels, role_vars, site, write_inventory  # noqa: E402


def timed_requests(url: str, count: int, budget_s: float) -> list:
    body = json.dumps({"model": "/models/stand-in", "messages": [{"role": "user", "content": "hi"}]}).encode()
    seconds, deadline = [], time.monotonic() + budget_s
    while len(seconds) < count and time.monotonic() < deadline:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                                  "Authorization": f"Bearer {API_KEY}"})
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        seconds.append(time.perf_counter() - start)
    return seconds


def summary(seconds: list) -> dict:
    ordered = sorted(seconds)
    return {"n": len(ordered), "median_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--bound", type=int, default=20, help="gate bound for the hang case (s)")
    args = parser.parse_args()
    ensure_base()
    download_wheels()
    fleet = Fleet(f"sb{os.getpid() % 10**6}")
    try:
        fleet.up(3, owner_pid=os.getpid())
        inventory = write_inventory(fleet, Path(tempfile.mkdtemp(prefix="svcbench-")))
        env = {"ANSIBLE_CACHE_PLUGIN": "memory"}
        started = time.monotonic()
        deployed = run_playbook(site(fleet), inventory, envvars=env)
        assert deployed.rc == 0, deployed.stdout[-3000:]
        print(f"deploy (stack stand-in, 5 units, gateway): {time.monotonic() - started:.0f} s")
        h1, _, h3 = (h["name"] for h in fleet.hosts)
        routed = deployed.task(h3, "Send requests through the gateway; every worker in rotation must answer "
                                   "one, none out of rotation")
        print(f"gateway gate: {routed['msg']}: "
              + ", ".join(f"{w['id']} {w['succeeded']}/{w['dispatched']}" for w in routed["workers"]))
        ip = {h["name"]: h["ip"] for h in fleet.hosts}

        hung = {"name": "hung", "model_path": "/models/stand-in", "port": 30020,
                "env": {"SGLANG_STAND_IN_MODE": "hang"}}
        play = [{"name": "hang", "hosts": h1, "gather_facts": False, "roles": ["sglang_service"],
                 "vars": role_vars(fleet, sglang_service_install=False, sglang_service_models=[hung],
                                   sglang_service_remove_unlisted=False,
                                   sglang_service_gate_bound=args.bound, sglang_service_gate_step=5)}]
        started = time.monotonic()
        result = run_playbook(play, inventory, envvars=env)
        wall = time.monotonic() - started
        probes = [r for r in result.results[h1] if r["task"] == "Probe sglang-hung"]
        cause = result.task(h1, "Diagnose sglang-hung")["cause"]
        print(f"hang: gate bound {args.bound} s, gate gave up after {probes[-1]['elapsed']:.1f} s "
              f"({len(probes)} progress steps), cause named: {cause}; whole play {wall:.0f} s")

        direct = f"http://{ip[h1]}:30000/v1/chat/completions"
        gateway = f"http://{ip[h3]}:{GATEWAY_PORT}/v1/chat/completions"
        timed_requests(direct, 20, 10)  # warm connections and caches
        timed_requests(gateway, 20, 10)
        d = summary(timed_requests(direct, args.requests, 120))
        g = summary(timed_requests(gateway, args.requests, 120))
        print(f"direct to a worker: n={d['n']} median {d['median_ms']:.2f} ms, p99 {d['p99_ms']:.2f} ms")
        print(f"through smg:        n={g['n']} median {g['median_ms']:.2f} ms, p99 {g['p99_ms']:.2f} ms")
        print(f"added by the gateway: median {g['median_ms'] - d['median_ms']:.2f} ms, "
              f"p99 {g['p99_ms'] - d['p99_ms']:.2f} ms")
    finally:
        fleet.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())

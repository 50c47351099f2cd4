"""The speculative-acceptance gate's overhead per host, one run, printed: the role's ``spec_gate`` entry
point on this machine against a STAND-IN SGLang server (tests/stand_ins/sglang-server, with EAGLE-3 on
its command line, parsed by the real sglang 0.5.23 parser), gate on against gate off.

    .venv/bin/python bench/spec_gate_timing.py [--runs 5] [--models 1]

Each run is a whole ``ansible-playbook`` of one play on localhost that enters ``sglang_service``
``tasks_from: spec_gate`` for ``--models`` drafting models (rendering the entries, then probing each or
skipping the probe). The difference of the medians is what the gate adds to a host's deploy; the ratio
is gate on / gate off. The stand-in answers at once, so this is the gate's own cost (Ansible, the
module, 8 prompts per model over HTTP), not a model's: on a real server add the time the model takes to
generate the probe's tokens (printed: prompts x max_new_tokens per model), at its decode speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

from ansible_run import run_playbook  # noqa: E402
from sglang_parser import parser_python  # noqa: E402
from test_spec_gate import EAGLE, _args, _free_port, _ready  # noqa: E402

DEFAULTS = REPO_ROOT / "roles" / "sglang_service" / "defaults" / "main.yml"


def gate_play(ports: list, gate: str) -> list:
    models = [{"name": f"m{n}", "model_path": "/models/kimi-k2.5", "port": port, "speculative": EAGLE}
              for n, port in enumerate(ports)]
    return [{"hosts": "localhost", "gather_facts": False,
             "vars": {"sglang_service_models": models, "sglang_service_python": "/opt/x/bin/python",
                      "sglang_service_capabilities": ["12.0"], "sglang_service_spec_gate": gate},
             "tasks": [{"name": "spec gate", "ansible.builtin.include_role": {
                 "name": "sglang_service", "tasks_from": "spec_gate"}}]}]


def timed(play: list) -> float:
    start = time.monotonic()
    result = run_playbook(play)
    seconds = time.monotonic() - start
    if result.rc != 0:
        raise SystemExit(f"the play failed (rc {result.rc}):\n{result.stdout[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", type=int, default=1)
    args = parser.parse_args()
    python = parser_python()
    procs, ports = [], []
    try:
        for _ in range(args.models):
            port = _free_port()
            env = dict(os.environ, SGLANG_STAND_IN_SPEC_ACCEPT_LENGTH="3.0", SGLANG_STAND_IN_DELAY="0")
            procs.append(subprocess.Popen([str(python), "-m", "sglang_server_stand_in", *_args(port, True)],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                          text=True))
            ports.append(port)
        for proc, port in zip(procs, ports):
            _ready(port, proc)
        on, off = [], []
        for _ in range(args.runs):  # interleaved, so drift in the machine's load hits both alike
            off.append(timed(gate_play(ports, "off")))
            on.append(timed(gate_play(ports, "fail")))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    prompts = json.loads((REPO_ROOT / "roles" / "sglang_service" / "files" / "spec_probe_prompts.json")
                         .read_text())
    tokens = next(line.split(":", 1)[1].strip() for line in DEFAULTS.read_text().splitlines()
                  if line.startswith("sglang_service_spec_max_new_tokens:"))
    load = os.getloadavg()[0]
    print(f"spec_gate entry point on localhost, {args.models} drafting model(s), {args.runs} runs each "
          f"(load average {load:.1f} on {os.cpu_count()} cores at the end)")
    for label, runs in (("gate off", off), ("gate on ", on)):
        listed = ", ".join(f"{seconds:.2f}" for seconds in runs)
        print(f"  {label} : median {statistics.median(runs):6.2f} s  (runs: {listed})")
    overhead = statistics.median(on) - statistics.median(off)
    print(f"  overhead per host: {overhead:.2f} s ({overhead / args.models:.2f} s per model); "
          f"ratio on/off {statistics.median(on) / statistics.median(off):.2f}")
    print(f"  on a real server add the generation of {len(prompts)} prompts x {tokens} new tokens per model")
    return 0


if __name__ == "__main__":
    sys.exit(main())

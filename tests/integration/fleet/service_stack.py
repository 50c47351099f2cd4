"""A stand-in for the ``fleet_stack`` fixture (issue 7) until that lands: on every fleet host, a uv-made
venv at ``/opt/sglang-service-test/stacks/test-stack`` behind the ``current`` link, uv itself, an empty
constraints file, and the stack's public facts (CONTRACT.md names) for the roles to read. It holds no
torch 2.14.1: the sglang_service tests install the parse-only set (tests/sglang_parser.py) into it,
through the role.

At integration, switch to ``fleet_stack``: take its facts instead of ``stack_facts()`` and drop
``prepare_stack``; the role then installs into the real stack (which already has torch 2.14.1 and
triton, so only sglang + the parse set's small packages go in with --no-deps).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from cache import pip_download
from light_stack import UV, uv_tasks
from sglang_parser import KEEP_PARSE, PARSER_WHEELS, STAND_IN

PY_SPY = "py-spy==0.4.3"  # the gate's stack dump of a hung server
SMG_WHEELS = ["smg==1.13.0", "setproctitle==1.3.8", "grpcio==1.85.3", "grpcio-health-checking==1.85.1",
              "protobuf==7.36.2", "PyYAML==6.0.4", "typing_extensions==4.16.0"]
# a root of its own: the session hosts' /opt/sglang/stacks belongs to fleet_stack (tests/stackrun.py)
STACK_ROOT = "/opt/sglang-service-test/stacks"
STACK = f"{STACK_ROOT}/test-stack"
UV_VENV = "/opt/sglang-test/uv"
UV_CONFIG = "/opt/sglang-test/uv.toml"


def download_wheels() -> None:
    """Every wheel the hosts need, in the served wheelhouse (hosts have no internet)."""
    pip_download([UV, PY_SPY, *SMG_WHEELS, *PARSER_WHEELS])


def stack_facts(wheelhouse_url: str) -> dict:
    return {
        "stack_profile_data": {"name": "test", "sglang": {"version": "0.5.23"}, "smg": {"version": "1.13.0"},
                          "flashinfer": {"version": ""}},
        "stack_python": f"{STACK}/bin/python",
        "stack_root": STACK_ROOT,
        "stack_current_link": f"{STACK_ROOT}/current",
        "stack_uv": f"{UV_VENV}/bin/uv",
        # uv 0.13.8 has no environment variable for --no-index: a config file says it
        "stack_uv_env": {"UV_CONFIG_FILE": UV_CONFIG, "UV_CACHE_DIR": "/var/cache/sglang-test-uv"},
        "stack_constraints_file": f"{STACK}/constraints.txt",
        "stack_sealed": False,
        "stack_target_capabilities": ["12.0"],
    }


def prepare_stack() -> list:
    """Plays that make the stand-in stack on every host (idempotent)."""
    return [{
        "name": "Stand-in stack for the sglang_service tests (until fleet_stack)",
        "hosts": "fleet",
        "gather_facts": False,
        "tasks": [
            *uv_tasks(UV_VENV, python="/usr/bin/python3"),
            {"name": "uv configuration: the wheelhouse only", "ansible.builtin.copy": {
                "content": 'no-index = true\nfind-links = ["{{ fleet_wheelhouse_url }}"]\n',
                "dest": UV_CONFIG, "mode": "0644"}},
            {"name": "stack venv", "ansible.builtin.command": {
                "argv": [f"{UV_VENV}/bin/uv", "venv", "--python", "/usr/bin/python3", STACK],
                "creates": f"{STACK}/bin/python"}},
            {"name": "constraints", "ansible.builtin.copy": {
                "content": "# stand-in stack: no pins\n", "dest": f"{STACK}/constraints.txt",
                "mode": "0644"}},
            {"name": "current link", "ansible.builtin.file": {
                "src": STACK, "dest": f"{STACK_ROOT}/current", "state": "link"}},
            {"name": "stand-in server module", "ansible.builtin.copy": {
                "src": str(STAND_IN), "dest": f"{STACK}/lib/python3.11/site-packages/{STAND_IN.name}",
                "mode": "0644"}},
        ],
    }]


# The scenario the sglang_service fleet tests and bench/sglang_service_bench.py share: hosts 1 and 2
# are replicas of `main` and a 2-node tensor-parallel pair, host 1 also has a slow starter, host 3 is
# the gateway.
GATEWAY_PORT = 8000
# The model servers and the gateway require it (smg sends its own key to the workers: the same key).
# The tests check that it never shows in a play's output.
API_KEY = "sk-fleet-test-7f3a9c51e2"
MAIN = {"name": "main", "model_path": "/models/stand-in", "host": "0.0.0.0", "port": 30000,
        "env": {"SGLANG_STAND_IN_DELAY": "2", **KEEP_PARSE}}
SLOW = {"name": "slow", "model_path": "/models/stand-in", "port": 30001,
        "env": {"SGLANG_STAND_IN_MODE": "slow-start", "SGLANG_STAND_IN_DELAY": "12", **KEEP_PARSE}}
PAIR = {"name": "pair", "model_path": "/models/stand-in", "port": 30010, "tp_size": 2, "nodes_group": "pair",
        "env": {"SGLANG_STAND_IN_DELAY": "2", **KEEP_PARSE}}


def write_inventory(fleet, root: Path) -> Path:
    """The fleet's inventory plus the scenario's groups and per-host models (an inventory directory)."""
    (root / "00-fleet.yml").write_text(Path(fleet.inventory).read_text())
    h1, h2, h3 = (h["name"] for h in fleet.hosts)
    groups = {"all": {"children": {
        "pair": {"hosts": {h1: None, h2: None}},
        "sglang_replicas": {"hosts": {h1: None, h2: None}},
        "sglang_gateway": {"hosts": {h3: None}},
    }}}
    (root / "10-groups.yml").write_text(yaml.safe_dump(groups))
    (root / "host_vars").mkdir(exist_ok=True)
    for host, models in ((h1, [MAIN, SLOW, PAIR]), (h2, [MAIN, PAIR]), (h3, [])):
        (root / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump({"sglang_service_models": models}))
    return root


def role_vars(fleet, **extra):
    return {**stack_facts(fleet.wheelhouse_url), "sglang_service_install_dependencies": False,
            "sglang_service_extra_packages": [*PARSER_WHEELS[1:], PY_SPY],
            "sglang_service_launch_module": "sglang_server_stand_in",
            "sglang_service_gate_step": 3, "sglang_service_gate_bound": 90, "sglang_service_restart_sec": 2,
            "sglang_service_api_key": API_KEY, "sglang_service_gateway_api_key": API_KEY,
            "sglang_service_gateway_model": "main", "sglang_service_gateway_host": "0.0.0.0",
            "sglang_service_gateway_port": GATEWAY_PORT, "sglang_service_gateway_health_interval_secs": 1,
            "sglang_service_gateway_discovery_interval_secs": 2, **extra}


def site(fleet):
    return [
        *prepare_stack(),
        {"name": "Models", "hosts": "sglang_replicas", "gather_facts": False, "vars": role_vars(fleet),
         "roles": ["sglang_service"]},
        {"name": "Gateway", "hosts": "sglang_gateway", "gather_facts": False, "vars": role_vars(fleet),
         "tasks": [{"name": "Gateway", "ansible.builtin.include_role": {"name": "sglang_service",
                                                                        "tasks_from": "gateway"}}]},
    ]

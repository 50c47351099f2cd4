"""A stand-in for the ``fleet_stack`` fixture (issue 7) until that lands: on every fleet host, a uv-made
venv at ``/opt/sglang/stacks/test-stack`` behind the ``current`` link, uv itself, an empty constraints
file, and the stack's public facts (CONTRACT.md names) for the roles to read. It holds no torch 2.14.1:
the sglang_service tests install the parse-only set (tests/sglang_parser.py) into it, through the role.

At integration, switch to ``fleet_stack``: take its facts instead of ``stack_facts()`` and drop
``prepare_stack``; the role then installs into the real stack (which already has torch 2.14.1 and
triton, so only sglang + the parse set's small packages go in with --no-deps).
"""

from __future__ import annotations

from cache import pip_download
from sglang_parser import PARSER_WHEELS, STAND_IN

UV = "uv==0.13.8"
SMG_WHEELS = ["smg==1.13.0", "setproctitle==1.3.8", "grpcio==1.85.3", "grpcio-health-checking==1.85.1",
              "protobuf==7.36.2", "PyYAML==6.0.4", "typing_extensions==4.16.0"]
STACK_ROOT = "/opt/sglang/stacks"
STACK = f"{STACK_ROOT}/test-stack"
UV_VENV = "/opt/sglang-test/uv"
UV_CONFIG = "/opt/sglang-test/uv.toml"


def download_wheels() -> None:
    """Every wheel the hosts need, in the served wheelhouse (hosts have no internet)."""
    pip_download([UV, *SMG_WHEELS, *PARSER_WHEELS])


def stack_facts(wheelhouse_url: str) -> dict:
    return {
        "stack_profile": {"name": "test", "sglang": {"version": "0.5.23"}, "smg": {"version": "1.13.0"},
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
            {"name": "uv in a venv", "ansible.builtin.pip": {
                "name": UV, "virtualenv": UV_VENV, "virtualenv_command": "/usr/bin/python3 -m venv",
                "extra_args": "{{ fleet_wheelhouse_pip_args }}"}},
            {"name": "uv configuration: the wheelhouse only", "ansible.builtin.copy": {
                "content": 'no-index = true\nfind-links = ["{{ fleet_wheelhouse_url }}"]\n',
                "dest": UV_CONFIG, "mode": "0644"}},
            {"name": "stack venv", "ansible.builtin.command": {
                "argv": [f"{UV_VENV}/bin/uv", "venv", "--python", "/usr/bin/python3", STACK],
                "creates": f"{STACK}/bin/python"}},
            {"name": "constraints", "ansible.builtin.copy": {
                "content": "# stand-in stack: no pins\n", "dest": f"{STACK}/constraints.txt", "mode": "0644"}},
            {"name": "current link", "ansible.builtin.file": {
                "src": STACK, "dest": f"{STACK_ROOT}/current", "state": "link"}},
            {"name": "stand-in server module", "ansible.builtin.copy": {
                "src": str(STAND_IN), "dest": f"{STACK}/lib/python3.11/site-packages/{STAND_IN.name}",
                "mode": "0644"}},
        ],
    }]

"""A real but light stack on fleet hosts, made the stack role's way (the pinned uv in stack_tools_dir, a uv
venv, stack.json, .sealed, current) with three small wheels from the served wheelhouse instead of torch (a
CUDA torch stack is ~6 GB a host): verify, snapshot and reproduce have something to check. Used by
bench/verify_timing.py and tests/integration/fleet/test_fleet_verify_doctor.py.
"""

from __future__ import annotations

import json

from pins import UV_DIR, UV_VERSION

LIGHT_WHEELS = ["filelock==4.3.1", "tqdm==4.70.1", "packaging==26.4"]
UV = f"uv=={UV_VERSION}"
LIGHT_STACK = "light-0123456789ab"


def uv_tasks(venv: str, python: str = "python3") -> list[dict]:
    """Tasks that put the pinned uv into its own venv on a fleet host, from the fleet's wheelhouse: a venv
    made --without-pip, uv installed into it by the host's own pip. The pip module's venv runs ensurepip
    and its pip lists the installed packages around the install (about 4 CPU-seconds a host, against 0.7
    this way)."""
    return [
        {"name": "Create uv's venv",
         "ansible.builtin.command": {"argv": [python, "-m", "venv", "--without-pip", venv],
                                     "creates": f"{venv}/bin/python"}},
        {"name": "Install uv",
         "ansible.builtin.command": {
             "cmd": f"{python} -m pip --python {venv}/bin/python install --quiet "
                    f"--disable-pip-version-check {{{{ fleet_wheelhouse_pip_args }}}} {UV}",
             "creates": f"{venv}/bin/uv"}},
    ]


# A real but light stack on every host, made the stack role's way (the pinned uv in stack_tools_dir, a uv
# venv, stack.json, .sealed, current) with three small wheels from the served wheelhouse instead of torch.
LIGHT_PLAY = [{
    "name": "A light stack on every host",
    "hosts": "all",
    "gather_facts": False,
    "vars": {"stack_dir": f"/opt/sglang/stacks/{LIGHT_STACK}", "uv": f"{UV_DIR}/bin/uv",
             "uv_env": {"UV_CACHE_DIR": "/var/cache/sglang/uv", "UV_PYTHON_DOWNLOADS": "never",
                        "UV_NO_CONFIG": "1"}},
    "tasks": [
        *uv_tasks(UV_DIR),
        {"name": "Create the stack's venv",
         "ansible.builtin.command": {"argv": ["{{ uv }}", "venv", "--python", "python3.11",
                                              "{{ stack_dir }}"], "creates": "{{ stack_dir }}/bin/python"},
         "environment": "{{ uv_env }}"},
        {"name": "Install three small distributions",
         "ansible.builtin.command": {"argv": ["{{ uv }}", "pip", "install", "--python",
                                              "{{ stack_dir }}/bin/python", "--no-index", "--find-links",
                                              "{{ fleet_wheelhouse_url }}", *LIGHT_WHEELS]},
         "environment": "{{ uv_env }}", "changed_when": True},
        {"name": "Write the stack manifest",
         "ansible.builtin.copy": {
             "dest": "{{ stack_dir }}/stack.json", "mode": "0644",
             "content": json.dumps({"stack_name": LIGHT_STACK, "profile_name": "light",
                                    "fingerprint": "0123456789ab" + "0" * 52, "targets": ["12.0"],
                                    "fingerprint_inputs": {}}) + "\n"}},
        {"name": "Seal it", "ansible.builtin.copy": {"dest": "{{ stack_dir }}/.sealed", "mode": "0444",
                                                     "content": "0123456789ab\n"}},
        {"name": "Point current at it",
         "ansible.builtin.file": {"src": LIGHT_STACK, "dest": "/opt/sglang/stacks/current", "state": "link"}},
    ],
}]

"""The fleet's hosts are separate real systemd machines, reachable over ssh, fenced off the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache import pip_download
from prereq import require

pytestmark = pytest.mark.integration

# A tiny pure-Python wheel: enough to prove hosts install from the controller's wheelhouse.
PROBE_WHEEL = "iniconfig==2.3.1"


def test_three_hosts_each_run_systemd_as_pid_1(fleet):
    assert len(fleet.hosts) == 3
    for h in fleet.hosts:
        remote = fleet.testinfra(h["name"])
        assert remote.check_output("hostname") == h["name"]
        assert remote.check_output("ps -p 1 -o comm=") == "systemd"
        assert remote.check_output("systemctl is-system-running") == "running"
        assert h["ip"] in remote.interface("eth0").addresses


def test_hosts_have_their_own_identity(fleet):
    ids, host_keys = set(), set()
    for h in fleet.hosts:
        remote = fleet.testinfra(h["name"])
        ids.add(remote.file("/etc/machine-id").content_string.strip())
        host_keys.add(remote.check_output("ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"))
    assert len(ids) == 3
    assert all(len(i) == 32 for i in ids)
    assert len(host_keys) == 3


def test_hosts_reach_each_other_and_nothing_outside(fleet):
    first, *peers = fleet.hosts
    remote = fleet.testinfra(first["name"])
    for peer in peers:
        assert remote.check_output(f"getent hosts {peer['name']}").split()[0] == peer["ip"]
        connect = f"import socket; socket.create_connection(('{peer['name']}', 22), 2)"
        assert remote.run(f'python3 -c "{connect}"').rc == 0
    assert remote.check_output("ip -4 route show default") == ""
    # no route: the kernel refuses at once, no packet leaves the host
    assert "unreachable" in remote.run("ip route get 192.0.2.1").stderr.lower()
    # and the controller would not forward for them even if they had a route
    assert Path(f"/proc/sys/net/ipv4/conf/{fleet.state['bridge']}/forwarding").read_text().strip() == "0"


def test_hosts_install_wheels_from_the_controllers_wheelhouse(fleet):
    pip_download([PROBE_WHEEL], Path(fleet.state["wheelhouse"]["dir"]))
    pip_args = fleet.inventory_vars()["fleet_wheelhouse_pip_args"]
    remote = fleet.testinfra(fleet.hosts[0]["name"])
    remote.check_output("python3 -m venv /opt/wheelhouse-probe")
    install = remote.run(f"/opt/wheelhouse-probe/bin/pip install {pip_args} {PROBE_WHEEL}")
    assert install.rc == 0, install.stderr
    version = remote.check_output("/opt/wheelhouse-probe/bin/python -c 'import importlib.metadata as m; "
                                  "print(m.version(\"iniconfig\"))'")
    assert version == PROBE_WHEEL.split("==")[1]


def test_cuda_toolkit_is_bound_read_only(fleet):
    require(bool(fleet.state["cuda_home"]), "no CUDA toolkit on this machine (nvcc not on PATH)")
    remote = fleet.testinfra(fleet.hosts[0]["name"])
    assert "release" in remote.check_output("/usr/local/cuda/bin/nvcc --version")
    remote.check_output("printf '__global__ void k(int *x) { *x = 1; }\\n' > /tmp/k.cu")
    compiled = remote.run("/usr/local/cuda/bin/nvcc -c /tmp/k.cu -o /tmp/k.o")
    assert compiled.rc == 0, compiled.stderr
    assert remote.file("/tmp/k.o").size > 0
    assert remote.run("touch /usr/local/cuda/bin/written-by-a-host").rc != 0


def test_plays_see_this_fleets_facts_not_a_cached_earlier_ones(fleet, fleet_play, repo_root):
    """ansible.cfg caches facts on disk (jsonfile, gathering = smart, 2 h), keyed by host name, and
    fleet host names recur: a play must not be handed an earlier host's facts. fleet_play uses the
    memory cache."""
    host = fleet.hosts[0]["name"]
    cached = repo_root / ".cache" / "facts"
    remember = ("- hosts: all\n  tasks:\n    - ansible.builtin.set_fact:\n"
                "        fleet_fact_generation: earlier\n        cacheable: true\n")
    try:
        # a person's play with the repository's ansible.cfg leaves the host's facts on disk
        env = {**os.environ, "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg")}
        subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(fleet.inventory),
                        "-l", host, "/dev/stdin"], input=remember, text=True, cwd=repo_root, check=True,
                       capture_output=True, env=env)
        assert [p for p in cached.glob(f"*{host}") if "earlier" in p.read_text()]
        result = fleet_play([{"hosts": host, "tasks": [{"name": "report the fact", "ansible.builtin.debug": {
            "msg": "{{ fleet_fact_generation | default('none') }}"}}]}])
    finally:
        for path in cached.glob(f"*{host}"):
            path.unlink()
    assert result.rc == 0, result.stdout
    assert result.task(host, "report the fact")["msg"] == "none"

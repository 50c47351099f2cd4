"""Molecule verify step (testinfra over ssh): the probe unit runs, serves, and was rolled host by host."""

from __future__ import annotations

import os
from pathlib import Path

import testinfra
import yaml

UNIT = "fleet-probe.service"
# The role's documented interface, read rather than copied: port and state directory
DEFAULTS = yaml.safe_load((Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "roles" / "fleet_probe" /
                           "defaults" / "main.yml").read_text())
PORT, STATE_DIR = DEFAULTS["fleet_probe_port"], DEFAULTS["fleet_probe_state_dir"]


def test_probe_service_is_enabled_and_running(host):
    service = host.service(UNIT)
    assert service.is_enabled
    assert service.is_running


def test_probe_serves_its_hostname(host):
    assert host.socket(f"tcp://0.0.0.0:{PORT}").is_listening
    page = host.check_output(f"python3 -c \"import urllib.request as u; "
                             f"print(u.urlopen('http://127.0.0.1:{PORT}/').read().decode())\"")
    assert page.strip() == host.check_output("hostname")


def test_side_effect_restarted_the_probe(host):
    before = host.file(f"{STATE_DIR}/invocation-before-restart").content_string.strip()
    now = host.check_output(f"systemctl show --property=InvocationID --value {UNIT}")
    assert before
    assert now
    assert before != now


def test_restarts_were_rolled_one_host_at_a_time():
    """serial: 1 restarts hosts in inventory order, each only after the previous one serves again:
    every host's restart started after the previous host recorded that it served again. Restarting
    them all at once would start every restart before any host served again."""
    hosts = testinfra.get_hosts(["ansible://fleet"], ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])
    started, served = {}, {}
    for host in hosts:
        name = host.backend.get_hostname()
        # one clock: the host runs in this machine's time namespace (no CLOCK_MONOTONIC offset)
        assert host.check_output("readlink /proc/self/ns/time") == os.readlink("/proc/self/ns/time")
        started[name] = int(host.check_output(
            f"systemctl show --property=ExecMainStartTimestampMonotonic --value {UNIT}"))
        served[name] = int(host.file(f"{STATE_DIR}/served-again-monotonic-usec").content_string)
        assert started[name] < served[name], f"{name}: served before its restart started"
    order = sorted(started)  # mol-1, mol-2: the inventory order serial: 1 follows
    assert len(order) == 2
    for previous, following in zip(order, order[1:]):
        assert started[following] > served[previous], (
            f"{following} restarted before {previous} served again: not one host at a time")

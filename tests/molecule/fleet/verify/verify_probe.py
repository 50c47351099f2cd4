"""Molecule verify step (testinfra over ssh): the probe unit runs, serves, and was rolled host by host."""

from __future__ import annotations

import os

import testinfra

PORT = 8080


def test_probe_service_is_enabled_and_running(host):
    service = host.service("fleet-probe.service")
    assert service.is_enabled
    assert service.is_running


def test_probe_serves_its_hostname(host):
    assert host.socket(f"tcp://0.0.0.0:{PORT}").is_listening
    page = host.check_output(f"python3 -c \"import urllib.request as u; "
                             f"print(u.urlopen('http://127.0.0.1:{PORT}/').read().decode())\"")
    assert page.strip() == host.check_output("hostname")


def test_side_effect_restarted_the_probe(host):
    before = host.file("/var/lib/fleet-probe/invocation-before-restart").content_string.strip()
    now = host.check_output("systemctl show --property=InvocationID --value fleet-probe.service")
    assert before
    assert now
    assert before != now


def test_restarts_were_rolled_one_host_at_a_time():
    """serial: 1 restarts hosts in inventory order, each after the previous one serves again.

    The hosts share the controller's kernel, so systemd's monotonic timestamps are comparable.
    """
    hosts = testinfra.get_hosts(["ansible://fleet"], ansible_inventory=os.environ["MOLECULE_INVENTORY_FILE"])
    started = {}
    for host in hosts:
        started[host.backend.get_hostname()] = int(host.check_output(
            "systemctl show --property=ExecMainStartTimestampMonotonic --value fleet-probe.service"))
    order = sorted(started, key=started.get)
    assert order == sorted(started), f"restart order {order} is not the inventory order"

"""Fast checks of the harness's decisions (no fleet is started): apt sources, subnets, names, launcher."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import cache
import pytest
from fleet import Fleet, FleetError, net, system
from fleet import host as hostlib
from fleet.base import apt_mirror, base_key, base_spec
from fleet.state import check_hostnames, check_name
from prereq import require

DEB822 = """\
Types: deb
# a comment inside a stanza
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
URIs: http://disabled.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main contrib
"""


@pytest.fixture
def etc_apt(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_FLEET_APT_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    return tmp_path


def test_apt_mirror_from_deb822_skips_disabled_and_other_suites(etc_apt):
    (etc_apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    (etc_apt / "sources.list.d" / "other.list.disabled").write_text("deb http://no.invalid/ bookworm main\n")
    assert apt_mirror("bookworm", etc_apt) == "http://mirror.invalid/debian"


def test_apt_mirror_from_one_line_format_with_options(etc_apt):
    (etc_apt / "sources.list").write_text(
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb-src http://src.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://one.invalid/debian bookworm main\n")
    assert apt_mirror("bookworm", etc_apt) == "http://one.invalid/debian"


@pytest.mark.parametrize("line", ["deb [arch=amd64 http://one.invalid/debian bookworm main",
                                  "deb [arch=amd64] http://one.invalid/debian", "deb", "deb []"])
def test_malformed_apt_source_line_names_file_and_line(etc_apt, line):
    (etc_apt / "sources.list").write_text(f"# comment\n{line}\n")
    with pytest.raises(FleetError, match=r"sources.list:2: not an apt source line"):
        apt_mirror("bookworm", etc_apt)


def test_apt_mirror_override_and_missing_suite(etc_apt, monkeypatch):
    (etc_apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    with pytest.raises(FleetError, match="SGLANG_FLEET_APT_MIRROR"):
        apt_mirror("trixie", etc_apt)
    monkeypatch.setenv("SGLANG_FLEET_APT_MIRROR", "http://override.invalid/debian")
    assert apt_mirror("trixie", etc_apt) == "http://override.invalid/debian"


def test_this_machine_has_a_mirror_for_its_suite():
    assert apt_mirror(str(base_spec()["suite"])).startswith(("http://", "https://", "file:/"))


def test_base_key_follows_the_package_list(monkeypatch):
    monkeypatch.delenv("SGLANG_FLEET_EXTRA_PACKAGES", raising=False)
    plain = base_key(base_spec())
    assert plain == base_key(base_spec())
    monkeypatch.setenv("SGLANG_FLEET_EXTRA_PACKAGES", "curl, jq")
    assert base_key(base_spec()) != plain


def test_subnet_is_derived_from_the_name_and_avoids_collisions(monkeypatch):
    monkeypatch.setattr(net, "_networks_in_use", lambda: [ipaddress.ip_network("10.0.0.0/8")])
    monkeypatch.setattr(net, "_peers_via_gateways", list)
    first = net.pick_subnet("alpha", [])
    assert first == net.pick_subnet("alpha", [])
    assert first.prefixlen == 24
    assert net.pick_subnet("alpha", [str(first)]) != first
    monkeypatch.setattr(net, "_networks_in_use", lambda: [first])
    assert net.pick_subnet("alpha", []) != first
    monkeypatch.setattr(net, "_networks_in_use", lambda: [ipaddress.ip_network("192.168.0.0/16")])
    with pytest.raises(FleetError, match="no free"):
        net.pick_subnet("alpha", [])


def test_subnet_avoids_peers_reached_through_the_gateway(monkeypatch):
    """A CI controller at 192.168.X.7 reached via the default route: a bridge on 192.168.X.0/24 would
    capture its traffic."""
    monkeypatch.setattr(net, "_networks_in_use", list)
    monkeypatch.setattr(net, "_peers_via_gateways", list)
    first = net.pick_subnet("alpha", [])
    monkeypatch.setattr(net, "_peers_via_gateways", lambda: [ipaddress.ip_network(f"{first[7]}/32")])
    assert net.pick_subnet("alpha", []) != first


def test_peers_of_open_connections_are_found():
    """An open TCP connection's peer is read back from /proc/net/tcp (here: this machine's own
    non-loopback address, so the test needs no network)."""
    addresses = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True)
    own = [a["local"] for entry in json.loads(addresses.stdout) for a in entry.get("addr_info", [])
           if not a["local"].startswith("127.")]
    require(bool(own), "this machine has no non-loopback IPv4 address")
    with socket.socket() as server:
        server.bind((own[0], 0))
        server.listen()
        with socket.create_connection(server.getsockname()), server.accept()[0]:
            peers = net._peers_via_gateways()
    assert ipaddress.ip_network(f"{own[0]}/32") in peers
    assert all(p.prefixlen == 32 and not p[0].is_loopback for p in peers)


@pytest.mark.parametrize("name", ["", "Dev", "1abc", "toolongname", "a-b", "a_b"])
def test_bad_fleet_names_are_refused(name):
    with pytest.raises(FleetError, match="fleet name"):
        check_name(name)


def test_link_names_fit_the_kernel_limit():
    longest = "a" * 9
    assert check_name(longest) == longest
    assert len(net.veth_name(longest, 99)) <= 15
    assert len(net.bridge_name(longest)) <= 15


def test_host_names_must_be_unique_hostnames():
    assert check_hostnames(["mol-1", "mol-2"]) == ["mol-1", "mol-2"]
    for bad in (["a", "a"], ["Upper"], ["trailing-"], []):
        with pytest.raises(FleetError):
            check_hostnames(bad)


def test_launcher_starts_nothing_unless_told_go(tmp_path):
    """A harness killed before recording the launcher's PID closes its stdin: nothing may start."""
    marker = tmp_path / "started"
    launch = [sys.executable, str(hostlib.LAUNCHER), "--", "touch", str(marker)]
    refused = subprocess.run(launch, stdin=subprocess.DEVNULL, check=False)
    assert refused.returncode == 1
    assert not marker.exists()
    started = subprocess.run(launch, input=b"go\n", check=False)
    assert started.returncode == 0
    assert marker.exists()


def test_cuda_toolkit_found_through_a_wrapper_script(tmp_path, monkeypatch):
    require(shutil.which("nvcc") is not None, "nvcc not on PATH")
    monkeypatch.delenv("SGLANG_FLEET_CUDA", raising=False)
    toolkit = hostlib.cuda_toolkit()
    assert toolkit is not None
    assert (toolkit / "bin" / "nvcc").is_file()
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {toolkit}/bin/nvcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:/usr/bin:/bin")
    assert hostlib.cuda_toolkit() == toolkit
    monkeypatch.setenv("SGLANG_FLEET_CUDA", "none")
    assert hostlib.cuda_toolkit() is None
    monkeypatch.setenv("SGLANG_FLEET_CUDA", str(Path(toolkit)))
    assert hostlib.cuda_toolkit() == toolkit
    monkeypatch.setenv("SGLANG_FLEET_CUDA", str(tmp_path / "not-a-toolkit"))
    with pytest.raises(FleetError, match="no bin/nvcc"):
        hostlib.cuda_toolkit()


def test_pip_download_asks_no_index_for_a_wheel_it_has(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cache.subprocess, "run", lambda cmd, **kwargs: calls.append(cmd))
    (tmp_path / "iniconfig-2.3.1-py3-none-any.whl").write_bytes(b"")
    assert cache.pip_download(["iniconfig==2.3.1"], tmp_path) == tmp_path
    assert calls == []
    for asked in (["iniconfig==2.3.2"], ["iniconfig>=2"], ["iniconfig==2.3.1", "pluggy==1.6.0"]):
        cache.pip_download(asked, tmp_path)
        assert calls[-1][-len(asked):] == asked
    cache.pip_download(["iniconfig==2.3.1"], tmp_path, deps=True)
    cache.pip_download(["iniconfig==2.3.1"], tmp_path, extra_args=["--platform", "win_amd64"])
    assert len(calls) == 5
    (tmp_path / "other-1.0-cp27-cp27mu-linux_armv7l.whl").write_bytes(b"")
    cache.pip_download(["other==1.0"], tmp_path)  # a wheel this interpreter cannot install
    assert len(calls) == 6


def test_unknown_host_is_a_fleet_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_FLEET_CACHE", str(tmp_path))
    with pytest.raises(FleetError, match="has no host 'x-1'"):
        Fleet("x").testinfra("x-1")




def test_a_cgroups_cpu_is_read_from_cpu_stat_and_noted_once_per_fleet(tmp_path, monkeypatch):
    monkeypatch.setattr(system, "_REAPED_CPU", {"seconds": 0.0})
    v2, v1, broken = tmp_path / "unified", tmp_path / "systemd", tmp_path / "broken"
    for group in (v2, v1, broken):
        group.mkdir()
    (v2 / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (broken / "cpu.stat").write_text("user_usec 1\n")
    assert system.cgroup_cpu_seconds(v2) == 2.5
    assert system.cgroup_cpu_seconds(v1) is None  # a v1 hierarchy's group has no cpu.stat
    assert system.cgroup_cpu_seconds(broken) is None
    # a fleet sits in both hierarchies: its CPU counts once, from the one that reports it
    system.note_reaped_cpu([v1, v2, v2])
    assert system.reaped_cpu_seconds() == 2.5
    system.note_reaped_cpu([v1])
    assert system.reaped_cpu_seconds() == 2.5

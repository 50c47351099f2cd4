"""A fleet's private network: one bridge on the controller, one network namespace + veth per host.

Hosts get an address on the bridge's /24 and no default route; the controller does not forward
(the bridge's ``forwarding`` switch is off, whatever the machine's ``ip_forward`` says). A
host therefore reaches the controller (ssh from it, the wheelhouse on it) and its peers, nothing else.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import sys
from pathlib import Path
from typing import Iterable, List, Optional

from .system import FleetError, run

# Third octets tried for 192.168.<n>.0/24, starting at a point derived from the fleet name.
SUBNET_OCTETS = range(100, 250)


def bridge_name(fleet: str) -> str:
    return f"fb-{fleet}"


def veth_name(fleet: str, index: int) -> str:
    return f"fv-{fleet}-{index}"


def netns_name(fleet: str, host: str) -> str:
    return f"fleet-{fleet}-{host}"


def _networks_in_use() -> List[ipaddress.IPv4Network]:
    """Every IPv4 network the machine has an address or a route in."""
    used = []
    for entry in json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for addr in entry.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False))
    for route in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default":
            try:
                used.append(ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False))
            except ValueError:
                continue
    return used


def _peers_via_gateways() -> List[ipaddress.IPv4Network]:
    """Addresses the machine reaches through a gateway (the default route) and needs: its gateways,
    its name servers and the peers of its open TCP connections (a CI controller, an apt proxy). A
    fleet bridge on their network would take their traffic away from the gateway."""
    peers = [r["gateway"] for r in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout
                                             or "[]") if r.get("gateway")]
    resolv = Path("/etc/resolv.conf")
    if resolv.exists():
        peers += [words[1] for words in map(str.split, resolv.read_text().splitlines())
                  if len(words) > 1 and words[0] == "nameserver"]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        remote, state = line.split()[2:4]
        if state != "0A":  # not LISTEN: a connection
            # the kernel prints the address as a host-order integer
            peers.append(str(ipaddress.IPv4Address(int(remote.split(":")[0], 16).to_bytes(4, sys.byteorder))))
    nets = []
    for peer in peers:
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            continue
        if address.version == 4 and not (address.is_loopback or address.is_unspecified):
            nets.append(ipaddress.ip_network(f"{address}/32"))
    return nets


def pick_subnet(fleet: str, taken: Iterable[str]) -> ipaddress.IPv4Network:
    """A /24 chosen deterministically from the name, skipping any that collides with the machine
    (addresses, routes, peers reached through its gateways) or with another fleet's subnet."""
    taken_nets = [ipaddress.ip_network(t) for t in taken] + _networks_in_use() + _peers_via_gateways()
    start = int(hashlib.sha256(fleet.encode()).hexdigest(), 16) % len(SUBNET_OCTETS)
    for step in range(len(SUBNET_OCTETS)):
        octet = SUBNET_OCTETS[(start + step) % len(SUBNET_OCTETS)]
        candidate = ipaddress.ip_network(f"192.168.{octet}.0/24")
        if not any(candidate.overlaps(net) for net in taken_nets):
            return candidate
    raise FleetError("no free 192.168.x.0/24 left for a fleet; tear some fleets down "
                     "(`python tests/fleet status` lists them)")


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _no_ipv6(link: str) -> None:
    """Nothing in a fleet uses IPv6 on the controller's side; it would only add router solicitations."""
    switch = Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6")
    if switch.exists():  # absent when the kernel has no IPv6
        switch.write_text("1\n")


def create_bridge(name: str, address: str) -> None:
    run(["ip", "link", "add", name, "type", "bridge"])
    _no_ipv6(name)
    # hosts reach the controller and each other only, even on a machine that forwards for others
    Path(f"/proc/sys/net/ipv4/conf/{name}/forwarding").write_text("0\n")
    run(["ip", "addr", "add", address, "dev", name])
    run(["ip", "link", "set", name, "up"])


def create_netns(name: str) -> None:
    run(["ip", "netns", "add", name])


def connect_host(netns: str, veth: str, bridge: str, address: str) -> None:
    """veth pair: ``veth`` on the bridge, ``eth0`` inside the host's namespace with ``address``."""
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    _no_ipv6(veth)
    run(["ip", "link", "set", veth, "master", bridge, "up"])
    script = (f"addr add {address} dev eth0\n"
              "link set eth0 up\n"
              "link set lo up\n")
    run(["ip", "-n", netns, "-batch", "-"], input_text=script)


def delete_link(name: Optional[str]) -> None:
    if name and link_exists(name):
        run(["ip", "link", "del", name], check=False)


def delete_netns(name: Optional[str]) -> None:
    if name and netns_exists(name):
        run(["ip", "netns", "del", name], check=False)

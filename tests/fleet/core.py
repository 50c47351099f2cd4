"""Fleet: bring N systemd hosts up, describe them (inventory, ssh, testinfra), and tear them down."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import testinfra
import yaml
from cache import pip_download, wheelhouse  # tests/cache.py (tests/ is on sys.path)

from . import claims, net
from . import host as hostlib
from .base import ensure_base, in_use
from .state import State, all_names, check_hostnames, check_name, locked, state_dir
from .system import (
    FleetError,
    cgroup_parents,
    cgroup_pids,
    is_alive,
    memory_bytes,
    require_tools,
    run,
    start_time,
)
from .teardown import NSPAWN_PROPAGATE, teardown


class Fleet:
    """A named fleet. ``Fleet(name).up(3)`` boots hosts; ``down()`` removes all it recorded."""

    def __init__(self, name: str):
        self.name = check_name(name)
        self.state = State.load(name)

    # --- description -------------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return state_dir(self.name)

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yml"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def hosts(self) -> List[Dict]:
        return list(self.state["hosts"]) if self.state else []

    @property
    def control_path(self) -> str:
        return str(claims.control_dir(self.name) / "%C")

    def ssh_args(self) -> List[str]:
        return [*hostlib.SSH_OPTIONS, "-o", f"ControlPath={self.control_path}"]

    @property
    def wheelhouse_url(self) -> str:
        return f"http://{self.state['controller_ip']}:{self.state['wheelhouse']['port']}/"

    def _address(self, host: str) -> str:
        for h in self.hosts:
            if h["name"] == host:
                return h["ip"]
        raise FleetError(f"fleet {self.name} has no host {host!r}; its hosts: "
                         f"{', '.join(h['name'] for h in self.hosts) or 'none (not up)'}")

    def ssh(self, host: str, command: str, *, check: bool = True, timeout: float = 120):
        """Run a shell command on a host over ssh (a connection master is kept for 30 s)."""
        return run(["ssh", *self.ssh_args(), "-o", "ControlMaster=auto", "-o", "ControlPersist=30s",
                    "-i", str(self.key), f"root@{self._address(host)}", command],
                   check=check, timeout=timeout)

    def testinfra(self, host: str):
        """A testinfra host reached over ssh with this fleet's key."""
        return testinfra.get_host(f"ssh://root@{self._address(host)}", ssh_identity_file=str(self.key),
                                  ssh_extra_args=" ".join(self.ssh_args()))

    def memory(self) -> Dict[str, Dict[str, int]]:
        """Per host, PSS and RSS in bytes of all its processes (nspawn and the whole container)."""
        return {h["name"]: memory_bytes(cgroup_pids(Path(h["cgroups"][0]))) for h in self.hosts}

    # --- bring-up ------------------------------------------------------------------------------
    def up(self, hosts: Union[int, Sequence[str]] = 3, *, wheel_dir: Optional[Path] = None,
           wheels: Sequence[str] = (), wheel_deps: bool = False, cuda: bool = True,
           owner_pid: Optional[int] = None, replace: bool = False) -> Fleet:
        """Boot the hosts (``3`` -> ``<name>-1..3``, or explicit names) and write the inventory.

        ``owner_pid``: a process whose death makes the fleet garbage for ``gc()`` (a pytest session);
        without it the fleet lives until ``down()``. On any failure everything made so far is removed.
        """
        require_tools()
        names = check_hostnames([f"{self.name}-{i}" for i in range(1, hosts + 1)]
                                if isinstance(hosts, int) else list(hosts))
        wheel_dir = Path(wheel_dir or wheelhouse()).resolve()
        if wheels:
            pip_download(list(wheels), wheel_dir, deps=wheel_deps)
        base = ensure_base()
        cuda_home = hostlib.cuda_toolkit() if cuda else None
        with locked(f"fleet-{self.name}"):
            existing = State.load(self.name)
            if existing and not replace:
                raise FleetError(f"fleet {self.name!r} already exists (state in {existing.dir}); "
                                 f"`python tests/fleet down --name {self.name}` first")
            if existing:
                teardown(existing)
            with in_use(base), claims.machine_lock():  # no base rebuild until the claim names it
                self.state = self._plan(names, base, wheel_dir, cuda_home, owner_pid)
            try:
                self._create(base)
            except BaseException as exc:
                try:
                    teardown(self.state)
                except FleetError as cleanup:
                    exc.add_note(f"cleaning up after that failed too: {cleanup}")
                self.state = None
                raise
        return self

    def _plan(self, names, base, wheel_dir, cuda_home, owner_pid) -> State:
        """Record every resource name before anything exists, and claim them (under machine_lock()).

        Refuses when any of the names exists already: another fleet of this name runs on the
        machine (from another cache root or checkout), or one was not torn down. Its teardown
        would otherwise remove ours, and ours its.
        """
        subnet = net.pick_subnet(self.name, [c["subnet"] for c in claims.all_claims() if c.get("subnet")])
        addresses = list(subnet.hosts())
        cgroup_roots = [p / f"sglang-fleet-{self.name}" for p in cgroup_parents()]
        owner = {"pid": owner_pid, "start": start_time(owner_pid)} if owner_pid else None
        # the netns name is unique on the machine (it holds both names): nspawn's machine name too
        hosts = [{"name": n, "ip": str(addresses[i + 1]), "netns": net.netns_name(self.name, n),
                  "machine": net.netns_name(self.name, n),
                  "veth": net.veth_name(self.name, i + 1), "dir": str(self.dir / "hosts" / n),
                  "cgroups": [str(r / n) for r in cgroup_roots], "pid": None, "start": None}
                 for i, n in enumerate(names)]
        state = State(self.name, {
            "name": self.name, "phase": "starting", "created": time.time(), "owner": owner,
            # the process whose children the hosts' launchers are (system.note_reaped_cpu)
            "launched_by": {"pid": os.getpid(), "start": start_time(os.getpid())},
            "subnet": str(subnet), "controller_ip": str(addresses[0]), "bridge": net.bridge_name(self.name),
            "cgroups": [str(r) for r in cgroup_roots], "base": str(base),
            "cuda_home": str(cuda_home) if cuda_home else None, "hosts": hosts,
            "wheelhouse": {"dir": str(wheel_dir), "port": None, "pid": None, "start": None,
                           # "_" cannot start a host name: no host's cgroup has this name
                           "cgroups": [str(r / "_wheelhouse") for r in cgroup_roots]},
        })
        busy = _existing(state.data)
        if busy:
            holder = claims.read(self.name)
            raise FleetError(
                f"fleet {self.name}: {', '.join(busy[:3])}{f' and {len(busy) - 3} more' if busy[3:] else ''} "
                f"already exist on this machine"
                + (f" (claimed by the fleet whose state is {holder.get('owner')})" if holder else "")
                + f"; another fleet named {self.name} runs from another cache root or checkout, or one was "
                f"not torn down: pick another name, or run `python tests/fleet down --name {self.name}` "
                f"with that fleet's SGLANG_FLEET_CACHE")
        shutil.rmtree(state.dir, ignore_errors=True)  # a previous fleet's files (its resources are gone)
        state.save()
        claims.claim(self.name, state.owner, str(subnet), str(base))
        return state

    def _record(self, entry: Dict):
        def record(pid: int) -> None:
            entry["pid"], entry["start"] = pid, start_time(pid)
            self.state.save()
        return record

    def _create(self, base: Path) -> None:
        st = self.state
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"fleet-{self.name}", "-f", str(self.key)])
        public_key = Path(str(self.key) + ".pub").read_text()
        for group in st["cgroups"]:
            Path(group).mkdir()  # no exist_ok: a cgroup of this name is another fleet's
        prefix = ipaddress.ip_network(st["subnet"]).prefixlen
        net.create_bridge(st["bridge"], f"{st['controller_ip']}/{prefix}")
        self._start_wheelhouse()
        hosts_file = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n" + "".join(
            f"{a} {n}\n" for a, n in [(st["controller_ip"], "fleet-controller")]
            + [(h["ip"], h["name"]) for h in st["hosts"]])
        binds = []
        if st["cuda_home"]:
            binds = [st["cuda_home"]] + ([f"{st['cuda_home']}:/usr/local/cuda"]
                                         if st["cuda_home"] != "/usr/local/cuda" else [])
        for h in st["hosts"]:
            host_dir = Path(h["dir"])
            hostlib.prepare(base, host_dir, h["name"], hosts_file, public_key)
            net.create_netns(h["netns"])
            net.connect_host(h["netns"], h["veth"], st["bridge"], f"{h['ip']}/{prefix}")
            for group in h["cgroups"]:
                Path(group).mkdir()
            overlay = f"{base}:{host_dir / 'upper'}:{host_dir / 'work'}:{host_dir / 'root'}"
            hostlib.start(hostlib.nspawn_command(host_dir, h["name"], h["machine"], h["netns"], binds),
                          [Path(c) for c in h["cgroups"]], host_dir / "console.log", self._record(h),
                          overlay=overlay, keep_netns=h["netns"], restart_on_reboot=True)
        for h in st["hosts"]:
            hostlib.wait_ready(h, self.key, Path(h["dir"]) / "console.log")
        self._write_inventory()
        st.data["phase"] = "ready"
        st.save()

    def _start_wheelhouse(self) -> None:
        wh, address = self.state["wheelhouse"], self.state["controller_ip"]
        for group in wh["cgroups"]:
            Path(group).mkdir()
        # a free port on the bridge address (something on the machine may listen on 0.0.0.0:8000)
        with socket.socket() as probe:
            probe.bind((address, 0))
            wh["port"] = probe.getsockname()[1]
        self.state.save()
        hostlib.start([sys.executable, "-m", "http.server", "--bind", address,
                       "--directory", wh["dir"], str(wh["port"])],
                      [Path(c) for c in wh["cgroups"]], self.dir / "wheelhouse.log", self._record(wh))
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((address, wh["port"]), timeout=1).close()
                return
            except OSError as exc:
                if time.monotonic() > deadline or not is_alive(wh["pid"], wh["start"]):
                    raise FleetError(f"wheelhouse server on {address}:{wh['port']} did not start: {exc}; "
                                     f"see {self.dir / 'wheelhouse.log'}") from exc
                time.sleep(0.1)

    def inventory_vars(self) -> Dict[str, str]:
        """Group variables of the inventory: how to connect, and where the controller serves wheels."""
        st, url = self.state, self.wheelhouse_url
        group_vars = {
            "ansible_user": "root", "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": " ".join(self.ssh_args()),
            "ansible_python_interpreter": "/usr/bin/python3",
            "fleet_name": self.name, "fleet_controller_address": st["controller_ip"],
            "fleet_wheelhouse_url": url,
            # plain http on the private bridge: pip wants the host marked trusted
            "fleet_wheelhouse_pip_args": f"--no-index --find-links {url} "
                                         f"--trusted-host {st['controller_ip']}",
        }
        if st["cuda_home"]:
            group_vars["fleet_cuda_home"] = "/usr/local/cuda"
        return group_vars

    def _write_inventory(self) -> None:
        hosts = {h["name"]: {"ansible_host": h["ip"]} for h in self.hosts}
        inventory = {"all": {"children": {"fleet": {"hosts": hosts, "vars": self.inventory_vars()}}}}
        self.inventory.write_text(
            f"# fleet {self.name}: written by tests/fleet, removed by its `down`.\n"
            "# Host names recur from fleet to fleet, and ansible.cfg caches facts on disk (jsonfile, 2 h):\n"
            "# run plays with ANSIBLE_CACHE_PLUGIN=memory so that none sees an earlier host's facts.\n"
            + yaml.safe_dump(inventory, sort_keys=False))

    # --- teardown -----------------------------------------------------------------------------
    def down(self) -> bool:
        """Remove everything the state records (False: there was no state); idempotent.

        Raises FleetError naming what could not be removed; the state is then kept for a retry.
        """
        with locked(f"fleet-{self.name}"):
            state = State.load(self.name)
            if state:
                teardown(state)
            self.state = None
            return state is not None


def _existing(data: Dict) -> List[str]:
    """The resources a fleet's state names that exist already (a new fleet must find none)."""
    hosts = data["hosts"]
    found = [f"claim {claims.claim_dir(data['name'])}"] if claims.claim_dir(data["name"]).exists() else []
    found += [f"link {n}" for n in [data["bridge"]] + [h["veth"] for h in hosts] if net.link_exists(n)]
    found += [f"netns {h['netns']}" for h in hosts if net.netns_exists(h["netns"])]
    found += [f"cgroup {c}" for c in data["cgroups"] if Path(c).exists()]
    found += [f"nspawn runtime directory {NSPAWN_PROPAGATE / h['machine']}" for h in hosts
              if (NSPAWN_PROPAGATE / h["machine"]).exists()]
    return found


def gc() -> List[str]:
    """Tear down fleets whose owner process (e.g. a killed pytest session) is gone; every one is tried,
    then a FleetError names those that could not be removed."""
    removed, failed = [], []
    for name in all_names():
        state = State.load(name)
        owner = state.data.get("owner") if state else None
        if owner and not is_alive(owner["pid"], owner["start"]):
            try:
                Fleet(name).down()
                removed.append(name)
            except FleetError as exc:
                failed.append(str(exc))
    if failed:
        raise FleetError("; ".join(failed))
    return removed

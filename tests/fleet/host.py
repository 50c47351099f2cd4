"""One fleet host: its overlay root (identity written into the upper layer), launch and readiness."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

from .system import CommandTimeout, FleetError, is_alive, run

LAUNCHER = Path(__file__).with_name("launch.py")
NVCC_TIMEOUT = 60  # seconds for `nvcc --dryrun` to say where its toolkit is
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]


def cuda_toolkit() -> Optional[Path]:
    """The machine's CUDA toolkit: ``SGLANG_FLEET_CUDA`` (a path, or ``none``), else from ``nvcc`` on PATH.

    nvcc may be a symlink or a wrapper script: resolve symlinks first, and when that does not land in
    a toolkit's bin/, ask nvcc itself where it lives (``--dryrun`` prints ``_HERE_=<toolkit>/bin``).
    """
    override = os.environ.get("SGLANG_FLEET_CUDA")
    if override:
        if override.lower() == "none":
            return None
        if not (Path(override) / "bin" / "nvcc").is_file():
            raise FleetError(f"SGLANG_FLEET_CUDA={override} has no bin/nvcc; point it at a CUDA toolkit "
                             f"or set it to 'none'")
        return Path(override).resolve()
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return None
    home = Path(nvcc).resolve().parent.parent
    if not (home / "include" / "cuda_runtime.h").is_file():
        try:
            proc = run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull], check=False,
                       timeout=NVCC_TIMEOUT)
        except CommandTimeout as exc:
            raise FleetError(f"{exc}: cannot tell where the CUDA toolkit is; set SGLANG_FLEET_CUDA to "
                             f"its directory, or to 'none'") from exc
        found = re.search(r"^#\$ _HERE_=(.+)$", proc.stdout + proc.stderr, re.MULTILINE)
        if not found:
            return None
        home = Path(found.group(1)).resolve().parent
    return home if (home / "bin" / "nvcc").is_file() else None


def _mkdir_like(lower: Path, upper: Path, rel: str) -> Path:
    """Create ``upper/rel`` (and parents) with the owner and mode the lower layer has."""
    path = upper
    for part in Path(rel).parts:
        path, lower = path / part, lower / part
        if not path.exists():
            path.mkdir()
            if lower.is_dir():
                st = lower.stat()
                os.chown(path, st.st_uid, st.st_gid)
                os.chmod(path, st.st_mode & 0o7777)
    return path


def prepare(base: Path, host_dir: Path, hostname: str, hosts_file: str, public_key: str) -> None:
    """Write this host's identity into a fresh upper layer: machine-id, hostname, ssh keys, name lookup."""
    shutil.rmtree(host_dir, ignore_errors=True)
    upper = host_dir / "upper"
    for sub in ("upper", "work", "root"):
        (host_dir / sub).mkdir(parents=True)
    etc = _mkdir_like(base, upper, "etc")
    (etc / "machine-id").write_text(uuid.uuid4().hex + "\n")
    (etc / "hostname").write_text(hostname + "\n")
    (etc / "hosts").write_text(hosts_file)
    # no name server: lookups of names not in /etc/hosts fail at once instead of timing out
    (etc / "resolv.conf").write_text("options timeout:1 attempts:1\n")
    ssh_dir = _mkdir_like(base, upper, "etc/ssh")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{hostname}",
         "-f", str(ssh_dir / "ssh_host_ed25519_key")])
    dot_ssh = _mkdir_like(base, upper, "root/.ssh")
    dot_ssh.chmod(0o700)
    (dot_ssh / "authorized_keys").write_text(public_key)
    (dot_ssh / "authorized_keys").chmod(0o600)


def nspawn_command(host_dir: Path, hostname: str, machine: str, netns: str, binds: List[str]) -> List[str]:
    """``machine`` must be unique on the machine: nspawn keeps /run/systemd/nspawn/propagate/<machine>."""
    return ["systemd-nspawn", "--quiet", "-D", str(host_dir / "root"), "-M", machine,
            f"--hostname={hostname}", "--boot",
            # no systemd on the controller: nothing to register with, stay in the launcher's cgroup
            "--register=no", "--keep-unit",
            f"--network-namespace-path=/run/netns/{netns}",
            "--resolv-conf=off", "--timezone=off", "--link-journal=no", "--console=read-only",
            *(f"--bind-ro={b}" for b in binds)]


def start(command: List[str], cgroups: List[Path], log: Path, record_pid, *, overlay: Optional[str] = None,
          keep_netns: Optional[str] = None, restart_on_reboot: bool = False) -> subprocess.Popen:
    """Start ``command`` through the launcher; ``record_pid(pid)`` must persist the PID before it runs.

    ``restart_on_reboot``: a host's nspawn is started again when its container reboots (launch.py)."""
    launcher = [sys.executable, str(LAUNCHER), *(f"--cgroup={c}" for c in cgroups)]
    if overlay:
        launcher += [f"--overlay={overlay}", f"--keep-netns={keep_netns}"]
    if restart_on_reboot:
        launcher.append("--restart-on-reboot")
    # No image locks: each host has its own root (the fleet's claim guards the names), and nspawn
    # leaves its lock files in /run/systemd/nspawn/locks behind whenever it is killed.
    env = {**os.environ, "SYSTEMD_NSPAWN_LOCK": "0"}
    with open(log, "ab") as out:
        proc = subprocess.Popen([*launcher, "--", *command], stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)
    record_pid(proc.pid)
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    return proc


def ssh_command(key: Path, address: str, *remote: str) -> List[str]:
    return ["ssh", *SSH_OPTIONS, "-o", "ConnectTimeout=2", "-o", "ControlPath=none", "-i", str(key),
            f"root@{address}", *remote]


def wait_ready(host: Dict, key: Path, log: Path, timeout: float = 120) -> None:
    """Until ssh works and systemd reports the boot finished with no failed unit."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not is_alive(host.get("pid"), host.get("start")):
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise FleetError(f"host {host['name']} exited while booting; console ({log}):\n{tail}")
        try:
            proc = run(ssh_command(key, host["ip"], "systemctl", "is-system-running", "--wait"), check=False,
                       timeout=max(1.0, deadline - time.monotonic()))
        except CommandTimeout:
            last = "systemd had not finished booting"
            break
        state = proc.stdout.strip()
        if state == "running":
            return
        if state == "degraded":
            failed = run(ssh_command(key, host["ip"], "systemctl", "--failed", "--no-legend", "--plain"),
                         check=False).stdout.strip()
            raise FleetError(f"host {host['name']} booted degraded; failed units:\n{failed}")
        last = (proc.stderr or proc.stdout).strip()
        time.sleep(0.2)
    raise FleetError(f"host {host['name']} ({host['ip']}) not ready after {timeout:.0f} s: {last}")

"""STAND-IN apt repository for the nvidia_driver role on GPU-less test hosts without NVIDIA's repository.

Builds real .deb files (dpkg-deb) named like NVIDIA's driver packages, in two branches (580 and 590,
so the branch pin has something to refuse), with empty payloads except systemd units and tiny daemons
that sleep, so that `apt`, pins, holds and `systemctl enable` act on them for real. The result is a
flat repository (Packages index written here) for `deb [trusted=yes] file:DIR ./`. Nothing in it is a
driver: no kernel module, no libraries.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

BRANCH_VERSIONS = ("580.95.05-1", "590.44.01-1")
DAEMON = ("#!/bin/sh\n# STAND-IN daemon (tests/stand_ins/driver_apt_repo.py): records its arguments, sleeps\n"
          "echo \"$@\" > /run/{name}.args\nexec sleep infinity\n")
UNIT = ("[Unit]\nDescription=STAND-IN {name}\n[Service]\nExecStart=/usr/bin/{name}\n"
        "[Install]\nWantedBy=multi-user.target\n")


def _package(out: Path, name: str, version: str, depends: str = "", daemon: bool = False) -> Path:
    root = out / "build" / f"{name}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    control = (f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: sglang-fleet tests\n"
               + (f"Depends: {depends}\n" if depends else "")
               + f"Description: STAND-IN for {name} (no driver inside)\n")
    (root / "DEBIAN" / "control").write_text(control)
    if daemon:
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / name).write_text(DAEMON.format(name=name))
        (root / "usr" / "bin" / name).chmod(0o755)
        (root / "usr" / "lib" / "systemd" / "system").mkdir(parents=True)
        (root / "usr" / "lib" / "systemd" / "system" / f"{name}.service").write_text(UNIT.format(name=name))
    deb = out / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


def build(out: Path) -> Path:
    """Build the repository in ``out`` (created) and return it."""
    out.mkdir(parents=True, exist_ok=True)
    debs = []
    for version in BRANCH_VERSIONS:
        debs.append(_package(out, "nvidia-persistenced", version, daemon=True))
        debs.append(_package(out, "nvidia-kernel-open-dkms", version))
        # exact-version dependencies, as NVIDIA's packages have: only a branch pin keeps them together
        depends = f"nvidia-persistenced (= {version}), nvidia-kernel-open-dkms (= {version})"
        debs.append(_package(out, "nvidia-driver-cuda", version, depends=depends))
        debs.append(_package(out, "nvidia-fabricmanager", version, daemon=True))
    debs.append(_package(out, "nvlsm", "2025.06.5-1"))
    entries = []
    for deb in debs:
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], check=True, capture_output=True,
                                 text=True).stdout.strip()
        data = deb.read_bytes()
        entries.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    (out / "Packages").write_text("\n".join(entries))
    subprocess.run(["rm", "-rf", str(out / "build")], check=True)
    return out

"""Machine-wide claims on fleet names.

A fleet's resource names (bridge ``fb-N``, veths, namespaces, cgroups, nspawn machine names) derive
from its name alone, so two fleets of one name, started from different cache roots or checkouts,
would share them, and one's teardown would remove the other's. Before a fleet makes anything it
claims its name: ``/run/sglang-fleet/<name>/`` appears atomically under a machine-wide lock, and
only the fleet whose state file the claim names may use those names, or remove them. The claim also
records the fleet's subnet and base tree, so subnet choice and base rebuilds see every fleet on the
machine whatever cache root it uses, and it holds the fleet's ssh control sockets (``cp/``): a short
path, well inside the 108 bytes a socket path may have.

Everything here lives in /run, which is emptied at boot, as are the namespaces, links and processes
a claim stands for.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

RUN_DIR = Path("/run/sglang-fleet")
# Not in a cache root: fleets from every cache root and checkout must see each other.
MACHINE_LOCK = Path("/run/lock/sglang-fleet.lock")
FIELDS = ("owner", "subnet", "base")


@contextmanager
def machine_lock() -> Iterator[None]:
    """Serialises name claims and subnet choice between every fleet user on this machine."""
    with open(MACHINE_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def claim_dir(name: str) -> Path:
    return RUN_DIR / name


def control_dir(name: str) -> Path:
    """Where every ssh connection master to the fleet's hosts keeps its socket (closed at teardown)."""
    return claim_dir(name) / "cp"


def read(name: str) -> Optional[Dict[str, str]]:
    """The claim on ``name`` (owner, subnet, base), None when there is none."""
    found = {}
    for field in FIELDS:
        try:
            found[field] = (claim_dir(name) / field).read_text().strip()
        except FileNotFoundError:
            if not claim_dir(name).is_dir():
                return None
    return found


def all_claims() -> List[Dict[str, str]]:
    if not RUN_DIR.is_dir():
        return []
    return [{"name": d.name, **(read(d.name) or {})} for d in sorted(RUN_DIR.iterdir())
            if d.is_dir() and not d.name.startswith(".")]


def claim(name: str, owner: str, subnet: str, base: str) -> None:
    """Claim ``name`` for the fleet whose state file is ``owner`` (call under machine_lock()).

    The claim is written complete in a scratch directory and renamed into place, so a claim never
    lacks its owner, whenever the caller is killed.
    """
    RUN_DIR.mkdir(mode=0o700, exist_ok=True)
    for scratch in RUN_DIR.glob(".new-*"):  # left by a claimer killed mid-way (we hold the lock)
        shutil.rmtree(scratch, ignore_errors=True)
    scratch = RUN_DIR / f".new-{name}-{os.getpid()}"
    scratch.mkdir(mode=0o700)
    (scratch / "cp").mkdir(mode=0o700)
    for field, value in zip(FIELDS, (owner, subnet, base)):
        (scratch / field).write_text(value + "\n")
    if claim_dir(name).exists():  # checked by the caller under the same lock: a bug if reached
        shutil.rmtree(scratch)
        raise FileExistsError(f"{claim_dir(name)} exists")
    scratch.rename(claim_dir(name))


def release(name: str, owner: str) -> None:
    """Remove the claim on ``name`` if ``owner`` holds it (another fleet's claim is left alone)."""
    with machine_lock():
        found = read(name)
        if found and found.get("owner") == owner:
            shutil.rmtree(claim_dir(name))

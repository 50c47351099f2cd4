"""A fleet's state file: every resource is recorded here BEFORE it is created.

Teardown reads only this file, so it removes exactly what this fleet made (by name and by PID), and
it still works after the harness was killed at any point: a recorded resource that was never created
is simply absent and skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from cache import cache_dir  # tests/cache.py (tests/ is on sys.path)

from .system import FleetError

# Interface names are limited to 15 bytes: "fv-<name>-<index>" must fit.
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,8}$")
HOST_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
MAX_HOSTS = 99


def fleets_root() -> Path:
    return cache_dir("fleets")


def state_dir(name: str) -> Path:
    """Where a fleet's state, key, inventory and host directories live."""
    return fleets_root() / check_name(name)


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise FleetError(f"fleet name {name!r}: use 1-9 lowercase letters/digits, starting with a letter "
                         f"(it becomes part of network interface names, which are limited to 15 bytes)")
    return name


def check_hostnames(names: List[str]) -> List[str]:
    if not 1 <= len(names) <= MAX_HOSTS:
        raise FleetError(f"a fleet has 1 to {MAX_HOSTS} hosts, not {len(names)}")
    bad = [n for n in names if not HOST_RE.match(n)]
    if bad or len(set(names)) != len(names):
        raise FleetError(f"host names must be unique lowercase hostnames (letters, digits, '-'): {names}")
    return names


class State:
    """The JSON state of one fleet, saved atomically (write a temporary file, then rename)."""

    def __init__(self, name: str, data: Dict):
        self.name = name
        self.data = data

    @property
    def dir(self) -> Path:
        return state_dir(self.name)

    @property
    def path(self) -> Path:
        return self.dir / "state.json"

    @property
    def owner(self) -> str:
        """How the fleet's claim on its name (claims.py) names this state: one string per cache root."""
        return str(self.path.resolve())

    @classmethod
    def load(cls, name: str) -> Optional[State]:
        path = state_dir(name) / "state.json"
        try:
            return cls(name, json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise FleetError(f"{path} is not valid JSON ({exc}); remove what it lists by hand") from exc

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump(self.data, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)

    def __getitem__(self, key: str):
        return self.data[key]


def all_names() -> List[str]:
    return sorted(p.parent.name for p in fleets_root().glob("*/state.json"))


@contextmanager
def locked(lock_name: str) -> Iterator[None]:
    """An exclusive lock shared by every process using the same cache root (released if we die)."""
    locks = fleets_root() / ".locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{lock_name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield

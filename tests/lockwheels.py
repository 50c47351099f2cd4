"""The committed stable lock's files for this machine, in the test wheelhouse (the same files users get).

Fetched once per cache by name and sha256 from the URLs the lock records (``module_utils/wheel_fetch``,
the project's own fetcher); later runs find them present. The fleet serves the wheelhouse to its hosts,
and local site.yml tests name it as a mirror.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.module_utils.pylock import read_lock, select, split_tools
from ansible.module_utils.wheel_fetch import fetch_all
from ansible_run import REPO_ROOT
from cache import wheelhouse_lock

STABLE_LOCK = REPO_ROOT / "profiles" / "pylock.stable.toml"


def lock_files(machine: str = "x86_64", glibc: str = "2.36") -> list[dict]:
    """The stable lock's files a Linux ``machine`` host with CPython 3.11 installs (uv's wheel too)."""
    lock, _ = read_lock(str(STABLE_LOCK))
    files, problems = select(lock, machine, "3.11", glibc)
    assert problems == [], problems
    return files


def stack_versions(machine: str = "x86_64") -> dict[str, str]:
    """{name: version} the stack holds when installed from the lock (uv goes to the tools directory)."""
    stack, _tools = split_tools(lock_files(machine))
    return {item["name"]: item["version"] for item in stack}


def fill_from_lock() -> Path:
    """Every file of the stable lock for this machine in the wheelhouse; returns the wheelhouse."""
    with wheelhouse_lock() as house:
        fetch_all(lock_files(), str(house))
    return house


def downloader_files(machine: str = "x86_64") -> list[dict]:
    """The stable lock's files of the weights downloader (roles/model_weights: huggingface_hub and what it
    needs), as the role selects them from stack_lock_files."""
    names = yaml.safe_load((REPO_ROOT / "roles/model_weights/vars/main.yml").read_text())[
        "__model_weights_downloader_packages"]
    files = [f for f in lock_files(machine) if f["name"] in names]
    assert sorted(f["name"] for f in files) == sorted(names), "the stable lock lacks a downloader package"
    return files

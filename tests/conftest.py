"""Shared pytest set-up.

- Makes this repository's ``module_utils/`` importable as ``ansible.module_utils.<name>``, the same
  import path Ansible uses when it ships a module to a host, so unit tests exercise the exact code.
- ``require(condition, reason)``: skip a test whose prerequisite is missing on a developer machine,
  but FAIL under CI (``CI`` set), where every prerequisite is installed by ``.ci/run`` and a skip
  would hide a test that never ran.
"""

from __future__ import annotations

import os
from pathlib import Path

import ansible.module_utils
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

if str(REPO_ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO_ROOT / "module_utils"))


def require(condition: bool, reason: str) -> None:
    """Skip locally / fail in CI when a test prerequisite is missing."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"prerequisite missing in CI (.ci/run must provide it): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT

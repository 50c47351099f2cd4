"""``require(condition, reason)``: skip a test whose prerequisite is missing on a developer machine, but
FAIL under CI (``CI`` set), where every prerequisite is installed by ``.ci/run`` and a skip would hide a
test that never ran.

A module of its own (not conftest.py) because pytest loads every conftest.py under the same module
name, so ``from conftest import ...`` would pick whichever conftest was imported last.
"""

from __future__ import annotations

import os

import pytest


def require(condition: bool, reason: str) -> None:
    """Skip locally / fail in CI when a test prerequisite is missing."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"prerequisite missing in CI (.ci/run must provide it): {reason}")
    pytest.skip(reason)

"""`make test` and `make test-all` select what tests/tiers.py EXTENDED_TESTS says: collected with
pytest's own -m selection (the marks are added before it reads them), the extended tier is exactly the
listed tests, and the two tiers together are every fleet test."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tiers
from ansible_run import REPO_ROOT

pytestmark = pytest.mark.integration

FLEET = "tests/integration/fleet"


def collected(*args: str) -> set[str]:
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *args, FLEET], check=False, cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_the_tiers_split_the_fleet_tests_as_listed():
    everything = collected()
    ci = collected("-m", "not extended")
    extended = collected("-m", "extended")
    assert ci
    assert extended
    assert ci.isdisjoint(extended)
    assert ci | extended == everything
    assert extended == {nodeid for nodeid in everything if tiers.extended(nodeid)}
    for module, tests in tiers.EXTENDED_TESTS.items():
        named = {nodeid.split("::")[1].split("[")[0] for nodeid in extended if nodeid.startswith(module)}
        assert named == set(tests) or (not tests and named), module

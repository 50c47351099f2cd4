"""The molecule scenario (tests/molecule/fleet) passes its full sequence on fleet hosts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fleet import Fleet

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[2]
SEQUENCE = ("create", "check", "converge", "idempotence", "side_effect", "verify", "destroy")


def test_molecule_fleet_scenario(fleet_base):
    venv_bin = str(Path(sys.executable).parent)
    # no ANSIBLE_CONFIG: molecule sets its own (the scenario's generated ansible.cfg) for every play
    env = {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
           "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "MOLECULE_GLOB": "molecule/*/molecule.yml"}
    proc = subprocess.run([str(Path(venv_bin) / "molecule"), "test", "-s", "fleet"], cwd=TESTS, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out[-6000:]
    for action in SEQUENCE:
        done = re.search(rf"^fleet > {action}: Executed: Successful$", out, re.MULTILINE)
        assert done, f"molecule action {action} did not succeed"
    verified = re.search(r"=+ (\d+) passed", out)
    assert verified, "the testinfra verify step ran no test"
    assert int(verified.group(1)) == 10  # 3 checks x 3 hosts + the cross-host rolling-order check
    assert Fleet("molecule").state is None

"""Every module in library/ documents itself: ``ansible-doc -M library NAME`` works and is complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (REPO_ROOT / "library").glob("*.py"))
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")


def test_there_are_modules():
    assert MODULES, "library/ holds no modules"


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc(name):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")}
    proc = subprocess.run([ANSIBLE_DOC, "-M", "library", "-t", "module", "-j", name], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)[name]
    doc = entry["doc"]
    assert doc["module"] == name
    assert doc["short_description"]
    assert doc["description"]
    assert entry["examples"].strip(), "EXAMPLES is empty"
    assert entry["return"], "RETURN is empty"
    assert doc["attributes"]["check_mode"]["support"] == "full"
    for option, spec in (doc.get("options") or {}).items():
        assert spec.get("description"), f"option {option} has no description"
        assert spec.get("type"), f"option {option} has no type"
    # ansible-doc also renders the text form users read
    text = subprocess.run([ANSIBLE_DOC, "-M", "library", "-t", "module", name], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 0, text.stderr
    assert "EXAMPLES" in text.stdout.upper()

"""Every module in library/ documents itself: ``ansible-doc -M library NAME`` works and is complete."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (REPO_ROOT / "library").glob("*.py"))
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")


def test_there_are_modules():
    assert MODULES, "library/ holds no modules"


def _ansible_doc(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([ANSIBLE_DOC, "-M", "library", "-t", "module", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def doc_json() -> dict:
    """``ansible-doc -j`` of every module, asked once (one ansible-doc start costs ~0.4 s)."""
    proc = _ansible_doc("-j", *MODULES)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def doc_text() -> dict[str, str]:
    """The text form users read, of every module, asked once and split per module."""
    proc = _ansible_doc(*MODULES)
    assert proc.returncode == 0, proc.stderr
    pages = re.split(r"^> MODULE (\S+) .*$", proc.stdout, flags=re.M)
    return dict(zip(pages[1::2], pages[2::2]))


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc(name, doc_json, doc_text):
    entry = doc_json[name]
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
    assert "EXAMPLES" in doc_text[name].upper()

"""Shared pytest set-up.

- Makes this repository's ``module_utils/`` importable as ``ansible.module_utils.<name>``, the same
  import path Ansible uses when it ships a module to a host, so unit tests exercise the exact code.
  ``SGLANG_FLEET_MODULE_UTILS`` names another directory to import them from instead: mutation testing
  (bench/mutation_score.py) points it at mutmut's mutated copy.
- Prerequisites: use ``from prereq import require`` (skip locally, fail under CI).
"""

from __future__ import annotations

import os
from pathlib import Path

import ansible.module_utils
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = os.environ.get("SGLANG_FLEET_MODULE_UTILS") or str(REPO_ROOT / "module_utils")

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT

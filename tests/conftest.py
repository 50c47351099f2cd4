"""Shared pytest set-up.

- Makes this repository's ``module_utils/`` importable as ``ansible.module_utils.<name>``, the same
  import path Ansible uses when it ships a module to a host, so unit tests exercise the exact code.
- Prerequisites: use ``from prereq import require`` (skip locally, fail under CI).
"""

from __future__ import annotations

from pathlib import Path

import ansible.module_utils
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

if str(REPO_ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO_ROOT / "module_utils"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT

"""Pins of the stable profile that tests spell out, read from profiles/stable.yml (never copied), so a
bumped pin cannot leave a test naming the old one."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
STABLE = REPO_ROOT / "profiles" / "stable.yml"
UV_VERSION = str(yaml.safe_load(STABLE.read_text())["uv"]["version"])
# the stack role's layout: <stack_tools_dir>/uv-<version> (roles/stack/vars/main.yml), its default tools dir
STACK_DEFAULTS = REPO_ROOT / "roles" / "stack" / "defaults" / "main.yml"
TOOLS_DIR = yaml.safe_load(STACK_DEFAULTS.read_text())["stack_tools_dir"]
UV_DIR = f"{TOOLS_DIR}/uv-{UV_VERSION}"
UV_BIN = f"{UV_DIR}/bin/uv"

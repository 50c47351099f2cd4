"""Pins of the stable profile that tests spell out, read from profiles/stable.yml (never copied), so a
bumped pin cannot leave a test naming the old one."""

from __future__ import annotations

from pathlib import Path

import yaml

STABLE = Path(__file__).resolve().parent.parent / "profiles" / "stable.yml"
UV_VERSION = str(yaml.safe_load(STABLE.read_text())["uv"]["version"])
# the stack role's layout: <stack_tools_dir>/uv-<version> (roles/stack/vars/main.yml), default tools dir
UV_DIR = f"/opt/sglang/tools/uv-{UV_VERSION}"
UV_BIN = f"{UV_DIR}/bin/uv"

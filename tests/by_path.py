"""Import a module from its file: bench/ scripts and tests/conftest.py are not packages."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load(name: str, path: Path) -> ModuleType:
    """The module in ``path``, registered as ``name`` in sys.modules (dataclasses look their module up
    there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""Disposable systemd hosts over ssh for tests: ``Fleet(name).up(3)`` ... ``.down()`` (see README.md)."""

from .core import Fleet, gc
from .system import FleetError
from .teardown import leftovers

__all__ = ["Fleet", "FleetError", "gc", "leftovers"]

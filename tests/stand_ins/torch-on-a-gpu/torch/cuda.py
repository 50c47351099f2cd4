"""STAND-IN (see torch/__init__.py): one visible device of capability $STAND_IN_TORCH_CAPABILITY."""

import os
from types import SimpleNamespace


def _capability():
    major, minor = os.environ.get("STAND_IN_TORCH_CAPABILITY", "9.0").split(".")
    return int(major), int(minor)


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return 0


def get_device_capability(device=None):
    return _capability()


def get_device_properties(device=None):
    major, minor = _capability()
    return SimpleNamespace(major=major, minor=minor, name="stand-in GPU")


def get_device_name(device=None):
    return "stand-in GPU"

"""The loader rule of upstream's sgl_kernel/load_utils.py, written for this test package: capability
9.0 loads sm90/common_ops, every other capability and no GPU load sm100/common_ops; compiled files
first; then the package-root common_ops. torch must be imported first (the library needs libc10)."""

import ctypes
import glob
import os

import torch


def variant_for(capability):
    return "sm90" if capability == (9, 0) else "sm100"


def _compiled_first(files):
    compiled = [f for f in files if any(ext in f for ext in (".so", ".pyd", ".dll"))]
    return compiled + [f for f in files if f not in compiled]


def load_common_ops():
    """(ctypes library, path, variant) of the common_ops file the rule selects for this process."""
    capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    variant = variant_for(capability)
    here = os.path.dirname(os.path.abspath(__file__))
    errors = []
    for pattern in (os.path.join(here, variant, "common_ops.*"), os.path.join(here, "common_ops.*")):
        for path in _compiled_first(glob.glob(pattern)):
            try:
                return ctypes.CDLL(path), path, variant
            except OSError as exc:
                errors.append(f"{path}: {exc}")
    raise ImportError("[sgl_kernel] CRITICAL: Could not load any common_ops library! " + "; ".join(errors))

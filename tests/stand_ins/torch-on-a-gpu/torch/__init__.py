"""STAND-IN for torch on a GPU host: the test machines have no GPU, so no real torch reports a device.

It answers only what the sgl_kernel loader (sgl_kernel/load_utils.py) and our probes ask: one CUDA
device whose capability is $STAND_IN_TORCH_CAPABILITY ("9.0" when unset), and a fixed arch list. Used to
check which common_ops file the real upstream loader picks for torch's current device, and how a
visible device is reported.
"""

from . import _C, cuda, version  # noqa: F401

__version__ = "0.0.0+stand-in"

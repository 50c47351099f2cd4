"""sglang-fleet's test stand-in for sgl_kernel: the same loader rule, one real kernel (scale_add)."""

import ctypes

import torch

from sgl_kernel.load_utils import load_common_ops
from sgl_kernel.version import __version__  # noqa: F401

common_ops, common_ops_path, selected_variant = load_common_ops()
common_ops.__file__ = common_ops_path  # as upstream's extension module has: the import check reads it
common_ops.sgl_scale_add.restype = ctypes.c_int
common_ops.sgl_scale_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float,
                                     ctypes.c_int64, ctypes.c_void_p]


def scale_add(x, y, alpha):
    """alpha * x + y on the GPU for contiguous float32 CUDA tensors of one shape."""
    if not (x.is_cuda and y.is_cuda and x.dtype == y.dtype == torch.float32 and x.shape == y.shape):
        raise ValueError("scale_add takes two float32 CUDA tensors of the same shape")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    status = common_ops.sgl_scale_add(out.data_ptr(), x.data_ptr(), y.data_ptr(), float(alpha), x.numel(),
                                      stream)
    if status:
        raise RuntimeError(f"sgl_scale_add failed: CUDA error {status}")
    return out

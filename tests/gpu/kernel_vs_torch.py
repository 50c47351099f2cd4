"""On a GPU host: import torch, then the installed test sgl_kernel (tests/kernel_pkg), report which
common_ops file the loader loaded, run its scale_add kernel and compare with torch. Exit 1 on mismatch."""

import json
import sys

import sgl_kernel
import torch

torch.manual_seed(0)
x = torch.randn(1 << 20, device="cuda", dtype=torch.float32)
y = torch.randn(1 << 20, device="cuda", dtype=torch.float32)
got = sgl_kernel.scale_add(x, y, 2.5)
want = 2.5 * x + y
torch.cuda.synchronize()
error = (got - want).abs().max().item()
report = {"torch": torch.__version__, "capability": ".".join(map(str, torch.cuda.get_device_capability())),
          "device": torch.cuda.get_device_name(), "loaded": sgl_kernel.common_ops_path,
          "variant": sgl_kernel.selected_variant, "max_abs_error": error, "elements": x.numel()}
print(json.dumps(report))
sys.exit(0 if error <= 1e-5 else 1)

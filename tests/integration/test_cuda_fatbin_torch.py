"""The scanner on a real CUDA torch install (2.14.1, cu130): every library of torch/lib against cuobjdump."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.cuda_fatbin import iter_candidate_files, scan_file
from cuobjdump import as_cuobjdump_lists, cuobjdump_listing
from torchenv import torch_python

pytestmark = pytest.mark.integration
TORCH_VERSION = "2.14.1"


def torch_lib(python: Path) -> Path:
    (lib,) = python.parent.parent.glob("lib/python*/site-packages/torch/lib")
    return lib


@pytest.fixture(scope="module")
def torch_env():
    python = torch_python(TORCH_VERSION)
    return python, torch_lib(python)


def test_every_torch_library_matches_cuobjdump(torch_env):
    _python, lib = torch_env
    files = list(iter_candidate_files([lib]))
    assert any(path.endswith("/libtorch_cuda.so") for path in files)
    mismatches = {}
    for path in files:
        code = scan_file(path)
        listed = cuobjdump_listing(Path(path))
        if as_cuobjdump_lists(code.sass, code.ptx) != listed:
            mismatches[path] = (code, listed)
    assert not mismatches


def test_libtorch_cuda_holds_what_torch_was_built_for_and_more(torch_env):
    python, lib = torch_env
    code = scan_file(lib / "libtorch_cuda.so")
    # torch's own answer, readable on a GPU-less host through the compiled flag list.
    flags = subprocess.run([str(python), "-c", "import torch; print(torch._C._cuda_getArchFlags())"],
                           capture_output=True, text=True, check=True, timeout=300).stdout.split()
    assert flags
    assert set(flags) <= set(code.sass)
    # Beyond that list, the library embeds arch-specific and family cubins (upstream facts, 2.14.1);
    # cuobjdump prints the sm_103f ones as plain sm_103, the scanner keeps the suffix.
    assert {"sm_90a", "sm_100a", "sm_103f", "sm_120a", "sm_121a"} <= set(code.sass)
    assert code.ptx == []

"""The smallest real install in which sglang's own argument parser runs without a GPU.

``sglang.srt.server_args.prepare_server_args`` (what ``sglang.launch_server`` calls first) imports
``sglang.srt.utils.common``, which imports torch, triton, numpy, PIL, starlette, IPython, aiohttp and
more at module level; nothing else of sglang's ~90 requirements is touched by parsing. So the parser
venv holds exactly these wheels, installed with ``--no-deps`` (found by importing until nothing was
missing; a newer sglang may need more: the import error names the module):

- sglang 0.5.23 itself (its wheel, no dependencies);
- torch 2.13.0+cpu (the CPU build this machine carries; sglang pins 2.14.1, whose CUDA wheels and
  nvidia-* libraries are several GB; parsing uses no torch code, it only has to import) and triton;
- the pure-Python and small binary packages below.

The same list goes into the fleet's wheelhouse (hosts have no internet) and is what the stand-in model
server (tests/stand_ins/sglang-server) needs next to sglang.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from cache import cache_dir, pip_download, uv_install

SGLANG = "sglang==0.5.23"
TORCH = "torch==2.13.0+cpu"
PARSER_DEPENDENCIES = [
    "triton==3.8.0", "numpy==2.4.6", "orjson==3.13.0", "psutil==7.2.2", "pybase64==1.5.1",
    "requests==2.34.2", "urllib3==2.8.0", "idna==3.20", "certifi==2026.10.19.post1",
    "typing_extensions==4.16.0", "packaging==26.4", "pillow==13.0.0", "starlette==1.10.0", "anyio==4.16.0",
    "msgspec==0.23.0", "pydantic==2.14.4", "pydantic_core==2.50.5", "typing-inspection==0.4.5",
    "pyzmq==27.3.0", "tqdm==4.70.1", "ipython==9.18.1", "traitlets==5.16.1", "Pygments==2.21.0",
    "aiohttp==3.14.5", "multidict==7.2.1", "attrs==26.1.0", "yarl==1.25.1", "propcache==0.5.4",
    "aiohappyeyeballs==2.7.1", "aiosignal==1.4.0", "frozenlist==1.8.0",
]
PARSER_WHEELS = [SGLANG, TORCH, *PARSER_DEPENDENCIES]
STAND_IN = Path(__file__).resolve().parent / "stand_ins" / "sglang-server" / "sglang_server_stand_in.py"
# A served model's env: the stand-in keeps the parser's accepted answers under the unit's home and reuses
# them at later starts of the same command line and stack (its docstring says what the key holds)
KEEP_PARSE = {"SGLANG_STAND_IN_PARSE_CACHE": ".cache/sglang-stand-in"}


def download_parser_wheels() -> Path:
    """Every wheel of PARSER_WHEELS in the shared wheelhouse (no-op when present)."""
    return pip_download(PARSER_WHEELS)


def parser_python(timeout: int = 1800) -> Path:
    """Python of a cached venv holding PARSER_WHEELS and the stand-in server module."""
    key = hashlib.sha256("\n".join(["uv-install", *PARSER_WHEELS]).encode()).hexdigest()[:12]
    root = cache_dir("venvs")
    venv = root / f"sglang-parser-{key}"
    python = venv / "bin" / "python"
    with open(root / f"sglang-parser-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            download_parser_wheels()
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            uv_install(python, PARSER_WHEELS, deps=False, timeout=timeout)
            (venv / ".ready").write_text("\n".join(PARSER_WHEELS) + "\n")
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    target = Path(site) / STAND_IN.name
    if not target.exists() or target.read_bytes() != STAND_IN.read_bytes():
        shutil.copyfile(STAND_IN, target)
    return python

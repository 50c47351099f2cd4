"""sglang_server_args in the controller's worker process, no module process (see controller_module.py)."""

from pathlib import Path
from runpy import run_path

ActionModule = run_path(str(Path(__file__).with_name("controller_module.py")))["ActionModule"]

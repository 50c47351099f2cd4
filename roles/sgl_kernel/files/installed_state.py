"""Print, as JSON, what the sgl_kernel role needs to know about a stack: torch's version, the kernel
distributions installed (old sgl-kernel, new sglang-kernel), the stack's purelib, the build record and
the sha256 of the lock whose sync finished in the stack (the stack role's .lock-installed, beside the
record; "" when there is none). Run by the stack's own interpreter; imports nothing heavy."""

import json
import os
import sys
import sysconfig
from importlib import metadata


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def record(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


print(json.dumps({"torch": version("torch"), "purelib": sysconfig.get_paths()["purelib"],
                  "python": sys.executable,
                  "dists": {name: version(name) for name in ("sgl-kernel", "sglang-kernel")},
                  "record": record(sys.argv[1]),
                  "lock_installed": text(os.path.join(os.path.dirname(sys.argv[1]), ".lock-installed"))}))

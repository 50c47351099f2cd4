"""Test harness only (``tests/ansible_run.py`` enables it): one module payload cache for every playbook the
tests run, instead of one per ansible-playbook process, and bytecode in each payload.

ansible-core builds a module's payload (the AnsiballZ zip: the module and the module_utils it imports,
found by parsing them) once per process and keeps it in ``DEFAULT_LOCAL_TMP/ansiballz_cache``, a
directory made for each process and removed at its exit; a test session runs a few hundred playbooks, so
it built the same payloads a few thousand times (about 0.1-0.15 s of CPU each). This plugin, loaded
before any task runs, makes that directory a link to ``$SGLANG_TEST_PAYLOAD_CACHE/<key>``: ansible-core
then finds the payloads an earlier process built (it locks an entry while writing it, so concurrent
processes share it safely).

Each payload put in that cache also gets bytecode (``with_bytecode``): an unchecked ``.pyc``, compiled here,
beside each ``.py``. Without it the host's Python compiled the payload's module_utils from source at every
module run (zipimport cannot write bytecode): a third of a module run's CPU on a fleet host (0.17-0.18 s
against 0.11 s a run of ``stat``, measured 2026-12-06). The code that runs is the same; what differs from
a production run is that the host does not compile it, and a host Python of another minor version
compiles it as before (the bytecode's magic number does not match).

ansible-core keys an entry by the module's name alone, so the directory's ``<key>`` is a hash of
everything a payload is built from: ansible-core's version and location, this Python's, and the content
of every file under the configured module and module_utils paths and the roles' own (a mutant of a
module_utils file, or another checkout, gets a directory of its own).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import marshal
import os
import sys
import zipfile
from pathlib import Path

import ansible
from ansible import constants as C
from ansible.executor import module_common
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: shared_payload_cache
type: aggregate
short_description: share ansible-core's module payload cache between the tests' playbook runs
description:
  - Test harness only. Links this process's ansiballz_cache directory to one keyed by the module sources,
    under the directory named by the environment variable SGLANG_TEST_PAYLOAD_CACHE (unset, does nothing).
requirements:
  - enabled in callbacks_enabled
"""

ENV = "SGLANG_TEST_PAYLOAD_CACHE"


def _paths(value) -> list[str]:
    if not value:
        return []
    return value if isinstance(value, list) else str(value).split(os.pathsep)


def role_plugin_dirs(roles_paths) -> list[Path]:
    """The library/ and module_utils/ directories of every role under ``roles_paths``."""
    return [role / kind for roles in roles_paths if Path(roles).expanduser().is_dir()
            for role in sorted(Path(roles).expanduser().iterdir()) for kind in ("library", "module_utils")
            if (role / kind).is_dir()]


def source_key(module_paths, module_utils_paths, roles_paths=()) -> str:
    """A hash of ansible-core's version and location, this Python's version (it compiles the bytecode) and
    every file under the given module and module_utils directories and the roles' own."""
    core = f"{ansible.__version__}\0{Path(ansible.__file__).parent}\0{sys.version}\0"
    digest = hashlib.sha256(core.encode())
    for kind, directories in (("modules", module_paths), ("module_utils", module_utils_paths),
                              ("roles", role_plugin_dirs(roles_paths))):
        for directory in directories:
            root = Path(directory).expanduser()
            digest.update(f"{kind}\0{root}\0".encode())
            if not root.is_dir():
                continue
            for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                digest.update(f"{path.relative_to(root)}\0".encode())
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:20]


def link_payload_cache(shared_root: str, local_tmp: str, module_paths, module_utils_paths,
                       roles_paths=()) -> Path | None:
    """Make ``local_tmp/ansiballz_cache`` a link to ``shared_root/<key>`` (its time of use updated: the
    test session removes keys unused for a day); None when that directory exists already."""
    shared = Path(shared_root) / source_key(module_paths, module_utils_paths, roles_paths)
    shared.mkdir(parents=True, exist_ok=True)
    os.utime(shared)
    link = Path(local_tmp) / "ansiballz_cache"
    if link.is_symlink() or link.exists():
        return None
    link.symlink_to(shared, target_is_directory=True)
    return shared


# The flags word of a hash-based .pyc whose source is not checked (PEP 552: bit 0 set, bit 1 clear).
UNCHECKED_HASH_PYC = (1).to_bytes(4, "little")


def bytecode(source: bytes, filename: str) -> bytes:
    """A hash-based, unchecked ``.pyc`` of ``source`` (PEP 552) for this interpreter."""
    code = compile(source, filename, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + UNCHECKED_HASH_PYC + importlib.util.source_hash(source) + \
        marshal.dumps(code)


def with_bytecode(zip_b64: bytes) -> bytes:
    """The payload (a base64 zip, as ansible-core keeps it) with a ``.pyc`` (``bytecode``) beside each
    ``.py``. zipimport loads a module's ``.pyc`` before its ``.py``, so a host's Python of this minor
    version runs the same code without compiling it; another version finds the magic number wrong and
    compiles the ``.py`` as before."""
    source = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_b64)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as payload:
        names = set(source.namelist())
        for info in source.infolist():
            data = source.read(info)
            payload.writestr(info, data)
            compiled = info.filename[:-3] + ".pyc"
            if info.filename.endswith(".py") and compiled not in names:
                payload.writestr(zipfile.ZipInfo(compiled, info.date_time), bytecode(data, info.filename))
    return base64.b64encode(out.getvalue())


def add_bytecode_when_cached() -> None:
    """Make ansible-core add the bytecode (with_bytecode) to each payload it puts in the cache; the
    process that builds a payload runs the same object, so every run of it gets the bytecode."""
    dump = module_common._CachedModule.dump
    if getattr(dump, "adds_bytecode", False):
        return

    def dump_with_bytecode(self, path: str) -> None:
        object.__setattr__(self, "zip_data", with_bytecode(self.zip_data))  # a frozen dataclass
        dump(self, path)

    dump_with_bytecode.adds_bytecode = True
    module_common._CachedModule.dump = dump_with_bytecode


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "shared_payload_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        shared_root = os.environ.get(ENV)
        if shared_root:
            link_payload_cache(shared_root, C.DEFAULT_LOCAL_TMP, _paths(C.DEFAULT_MODULE_PATH),
                               _paths(C.DEFAULT_MODULE_UTILS_PATH), _paths(C.DEFAULT_ROLES_PATH))
            add_bytecode_when_cached()

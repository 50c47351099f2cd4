"""tests/callback_plugins/shared_payload_cache.py: the playbooks the tests run share one module payload
cache, keyed by the module sources, and a payload never outlives the sources it was built from."""

from __future__ import annotations

import base64
import io
import os
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import ansible_run
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "callback_plugins"))
import shared_payload_cache as plugin

MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.payload_probe import VALUE


def main():
    module = AnsibleModule(argument_spec={})
    module.exit_json(changed=False, value=VALUE)


if __name__ == "__main__":
    main()
'''


def sources(tmp_path: Path, value: int) -> tuple[Path, Path]:
    library, utils = tmp_path / "library", tmp_path / "module_utils"
    library.mkdir(exist_ok=True)
    utils.mkdir(exist_ok=True)
    (library / "payload_probe.py").write_text(MODULE)
    (utils / "payload_probe.py").write_text(f"VALUE = {value}\n")
    return library, utils


def test_the_key_follows_every_source_file_and_ignores_bytecode(tmp_path):
    library, utils = sources(tmp_path, 1)
    roles = tmp_path / "roles"
    (roles / "r" / "library").mkdir(parents=True)
    first = plugin.source_key([str(library)], [str(utils)], [str(roles)])
    assert plugin.source_key([str(library)], [str(utils)], [str(roles)]) == first
    (utils / "__pycache__").mkdir()
    (utils / "__pycache__" / "payload_probe.cpython-311.pyc").write_bytes(b"\0")
    assert plugin.source_key([str(library)], [str(utils)], [str(roles)]) == first
    (utils / "payload_probe.py").write_text("VALUE = 2\n")
    second = plugin.source_key([str(library)], [str(utils)], [str(roles)])
    assert second != first
    (roles / "r" / "library" / "own.py").write_text("# a role's module\n")
    assert plugin.source_key([str(library)], [str(utils)], [str(roles)]) not in (first, second)
    assert plugin.source_key([str(library)], [str(utils)], [str(roles)]) != plugin.source_key(
        [str(library)], [str(utils)])


def test_the_process_cache_becomes_a_link_to_the_keyed_shared_one(tmp_path):
    library, utils = sources(tmp_path, 1)
    local_tmp = tmp_path / "ansible-local-1"
    local_tmp.mkdir()
    shared = plugin.link_payload_cache(str(tmp_path / "shared"), str(local_tmp), [str(library)], [str(utils)])
    assert shared == tmp_path / "shared" / plugin.source_key([str(library)], [str(utils)])
    assert (local_tmp / "ansiballz_cache").resolve() == shared.resolve()
    assert shared.is_dir()
    # a process whose cache exists already keeps it
    assert plugin.link_payload_cache(str(tmp_path / "shared"), str(local_tmp), [str(library)],
                                     [str(utils)]) is None


@pytest.mark.parametrize("shared", [True, False])
def test_a_changed_module_utils_file_reaches_the_next_playbook(tmp_path, shared):
    """Real ansible-playbook runs: the second payload is built from the changed source, not served from
    the first run's cache entry (ansible-core keys an entry by the module's name alone)."""
    library, utils = sources(tmp_path, 1)
    cache = tmp_path / "payloads"
    envvars = {"ANSIBLE_LIBRARY": str(library), "ANSIBLE_MODULE_UTILS": str(utils),
               "SGLANG_TEST_PAYLOAD_CACHE": str(cache) if shared else ""}
    assert ansible_run.run_module("payload_probe", envvars=envvars)["value"] == 1
    assert ansible_run.run_module("payload_probe", envvars=envvars)["value"] == 1
    entries = sorted(p.name for p in cache.glob("*/*") if not p.name.endswith(".lock"))
    assert entries == (["ansible.legacy.payload_probe-ZIP_DEFLATED-none"] if shared else [])
    (utils / "payload_probe.py").write_text("VALUE = 2\n")
    assert ansible_run.run_module("payload_probe", envvars=envvars)["value"] == 2
    assert len(list(cache.glob("*"))) == (2 if shared else 0)


def test_the_tests_playbooks_use_the_shared_cache():
    env = ansible_run._env(None)
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "shared_payload_cache"
    assert Path(env["ANSIBLE_CALLBACK_PLUGINS"], "shared_payload_cache.py").is_file()
    assert env["SGLANG_TEST_PAYLOAD_CACHE"] == str(ansible_run.PAYLOAD_CACHE)


def test_keys_unused_for_a_day_are_pruned(tmp_path):
    old, fresh = tmp_path / "old", tmp_path / "fresh"
    for key in (old, fresh):
        key.mkdir()
        (key / "ansible.modules.stat-ZIP_DEFLATED-none").write_bytes(b"zip")
    day_ago = time.time() - 86400 - 60
    os.utime(old, (day_ago, day_ago))
    assert ansible_run.prune_payload_cache(tmp_path) == [old]
    assert not old.exists()
    assert fresh.is_dir()
    assert ansible_run.prune_payload_cache(tmp_path / "missing") == []


def payload_zip(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as payload:
        for name, text in files.items():
            payload.writestr(name, text)
    return base64.b64encode(out.getvalue())


def import_value(tmp_path: Path, zip_b64: bytes, edit=None) -> str:
    """Import package ``p.m`` from the payload in a fresh interpreter; ``edit(name, data)`` may rewrite
    each zip member first."""
    source = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_b64)))
    path = tmp_path / "payload.zip"
    with zipfile.ZipFile(path, "w") as payload:
        for info in source.infolist():
            data = source.read(info)
            payload.writestr(info, edit(info.filename, data) if edit else data)
    done = subprocess.run([sys.executable, "-B", "-c", f"import sys; sys.path.insert(0, {str(path)!r}); "
                           "import p.m; print(p.m.VALUE, p.m.__spec__.origin.rsplit('.', 1)[1])"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_payload_gets_bytecode_that_zipimport_runs_instead_of_compiling(tmp_path):
    zip_b64 = plugin.with_bytecode(payload_zip({"p/__init__.py": "", "p/m.py": "VALUE = 1\n"}))
    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_b64))).namelist()
    assert sorted(names) == ["p/__init__.py", "p/__init__.pyc", "p/m.py", "p/m.pyc"]
    assert import_value(tmp_path, zip_b64) == "1 pyc"
    # the bytecode is what runs: a source changed after it was compiled is not read
    changed = import_value(tmp_path, zip_b64, lambda name, data: b"VALUE = 2\n" if name == "p/m.py" else data)
    assert changed == "1 pyc"
    # another Python's bytecode (another magic number) is passed over: the source is compiled as before
    other = import_value(tmp_path, zip_b64, lambda name, data: b"\0\0\r\n" + data[4:] if name.endswith(".pyc")
                         else b"VALUE = 2\n" if name == "p/m.py" else data)
    assert other == "2 py"


def test_a_module_run_through_the_tests_cache_runs_its_payload_with_bytecode(tmp_path):
    library, utils = sources(tmp_path, 3)
    cache = tmp_path / "payloads"
    envvars = {"ANSIBLE_LIBRARY": str(library), "ANSIBLE_MODULE_UTILS": str(utils),
               "SGLANG_TEST_PAYLOAD_CACHE": str(cache)}
    assert ansible_run.run_module("payload_probe", envvars=envvars)["value"] == 3
    (entry,) = cache.glob("*/ansible.legacy.payload_probe-ZIP_DEFLATED-none")
    with entry.open("rb") as handle:
        cached = pickle.load(handle)
    names = set(zipfile.ZipFile(io.BytesIO(base64.b64decode(cached.zip_data))).namelist())
    sources_in_payload = {name for name in names if name.endswith(".py")}
    assert "ansible/module_utils/payload_probe.py" in sources_in_payload
    assert {name + "c" for name in sources_in_payload} <= names

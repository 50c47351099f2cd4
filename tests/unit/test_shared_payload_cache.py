"""tests/callback_plugins/shared_payload_cache.py: the playbooks the tests run share one module payload
cache, keyed by the module sources, and a payload never outlives the sources it was built from."""

from __future__ import annotations

import os
import sys
import time
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

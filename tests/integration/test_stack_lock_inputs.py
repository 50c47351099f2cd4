"""The stack role refuses a bad profile or lock before anything is created (real role, this machine).

Each case runs the stack role's main tasks on localhost with a throwaway stack root, tools directory
and wheel store, and a profile + lock written by the test, then checks the message the user sees and
that nothing was created under the stack root. The one real file needed, uv's wheel, is taken from
the committed stable lock (fetched into the test cache once, by name and sha256).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.pylock import read_lock, select
from ansible.module_utils.wheel_fetch import fetch_all
from ansible_run import REPO_ROOT, run_playbook
from cache import cache_dir
from pins import STABLE

pytestmark = pytest.mark.integration

UV_WHEEL_MARK = "uv-0.13.8-"


def real_uv_file() -> dict:
    lock, _ = read_lock(str(REPO_ROOT / "profiles" / "pylock.stable.toml"))
    files, _ = select(lock, "x86_64", "3.11", "2.36")
    (uv,) = [item for item in files if item["name"] == "uv"]
    fetch_all([uv], str(cache_dir("lock-inputs")))
    return uv


def pkg(name, version, filename, sha, url=""):
    return (
        f'[[packages]]\nname = "{name}"\nversion = "{version}"\n'
        f'wheels = [{{ url = "{url or "https://files.invalid/" + filename}", '
        f'hashes = {{ sha256 = "{sha}" }} }}]\n\n'
    )


def lock_text(uv: dict, *, requires=">=3.11", sglang="0.5.23", uv_sha=None, machine="x86_64") -> str:
    text = f'lock-version = "1.0"\ncreated-by = "test"\nrequires-python = "{requires}"\n\n'
    text += pkg("uv", "0.13.8", uv["filename"], uv_sha or uv["sha256"])
    for name, version in (
        ("torch", "2.14.1"),
        ("sglang", sglang),
        ("flashinfer-python", "0.7.2"),
        ("sglang-kernel", "0.4.10"),
    ):
        filename = f"{name.replace('-', '_')}-{version}-py3-none-manylinux_2_17_{machine}.whl"
        text += pkg(name, version, filename, hashlib.sha256(name.encode()).hexdigest())
    return text


@pytest.fixture(scope="module")
def uv_file():
    return real_uv_file()


@pytest.fixture
def setup(tmp_path, uv_file):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    profile = yaml.safe_load(STABLE.read_text())
    mirror = cache_dir("lock-inputs")

    def run(*, profile_changes=None, lock=None, profile_text=None, no_index=True):
        data = yaml.safe_load(yaml.safe_dump(profile))
        for dotted, value in (profile_changes or {}).items():
            *parents, key = dotted.split(".")
            node = data
            for parent in parents:
                node = node[parent]
            node[key] = value
        path = profiles / "stable.yml"
        path.write_text(profile_text if profile_text is not None else yaml.safe_dump(data))
        if lock is not None:
            (profiles / "pylock.stable.toml").write_text(lock)
        variables = {
            "stack_profile": str(path),
            "stack_root": str(tmp_path / "stacks"),
            "stack_tools_dir": str(tmp_path / "tools"),
            "stack_uv_cache_dir": str(tmp_path / "uvcache"),
            "stack_wheel_store": str(tmp_path / "store"),
            "stack_wheel_cache_dir": "",
            "stack_find_links": [str(mirror)],
            "stack_no_index": no_index,
            "stack_min_free_gb": 0.01,
            "gpu_capability": "12.0",
        }
        # play vars, not extra vars: an extra stack_profile would outrank the profile the role publishes
        play = [
            {"hosts": "localhost", "gather_facts": False, "vars": variables, "roles": [{"role": "stack"}]}
        ]
        return run_playbook(play)

    run.root = tmp_path / "stacks"
    return run


def failure(result) -> str:
    assert result.rc != 0, result.stdout[-3000:]
    failed = [res for res in result.results["localhost"] if res["event"] == "runner_on_failed"]
    assert len(failed) == 1, failed
    return failed[0]["msg"]


def nothing_under(root: Path) -> bool:
    return not root.exists() or list(root.iterdir()) == []


def test_a_profile_without_a_lock_says_make_lock(setup):
    message = failure(setup())
    assert message.startswith("profile stable has no lock: ")
    assert message.endswith(
        "pylock.stable.toml does not exist. Run `make lock PROFILE=stable` on the controller "
        "and commit the file; nothing was installed"
    )
    assert nothing_under(setup.root)


def test_a_lock_whose_pins_moved_names_the_package(setup, uv_file):
    message = failure(setup(lock=lock_text(uv_file, sglang="0.5.22")))
    assert "does not match profile stable: sglang: the profile pins 0.5.23, " in message
    assert "pylock.stable.toml has 0.5.22; run `make lock PROFILE=stable` and commit " in message
    assert nothing_under(setup.root)


def test_a_lock_that_is_not_toml_names_file_and_line(setup):
    message = failure(setup(lock='lock-version = "1.0"\n\nname = = 3\n[[packages]]\n'))
    assert "pylock.stable.toml is not valid TOML: " in message
    assert "line 3" in message
    assert nothing_under(setup.root)


def test_a_profile_that_is_not_yaml_names_file_and_line(setup, uv_file):
    message = failure(setup(profile_text="name: stable\n- python\n", lock=lock_text(uv_file)))
    assert "stable.yml is not valid YAML at line 2, column 1: expected <block end>, but found '-'" in message
    assert nothing_under(setup.root)


def test_a_lock_for_another_python_says_which_before_anything(setup, uv_file):
    message = failure(setup(lock=lock_text(uv_file, requires=">=3.12")))
    assert (
        "pylock.stable.toml is for Python >=3.12, the host's stack Python is 3.11. Nothing was installed."
        in message
    )
    assert nothing_under(setup.root)


def test_a_lock_for_another_platform_names_each_package(setup, uv_file):
    message = failure(setup(lock=lock_text(uv_file, machine="aarch64")))
    assert "torch 2.14.1: " in message
    assert "has no wheel for CPython 3.11 on Linux x86_64" in message
    assert nothing_under(setup.root)


def test_a_file_that_no_longer_matches_its_hash_is_named_and_nothing_installed(setup, uv_file):
    message = failure(setup(lock=lock_text(uv_file, uv_sha="0" * 64)))
    assert message.startswith("1 of 1 files could not be fetched into ")
    assert f"{uv_file['filename']} (uv==0.13.8): " in message
    assert f"sha256 {uv_file['sha256']}, the lock has {'0' * 64}" in message
    assert message.endswith("Nothing was installed.")
    assert nothing_under(setup.root)


def test_a_bundle_missing_a_file_names_it(setup, uv_file):
    missing = "uv-0.13.8-py3-none-linux_x86_64.whl"  # not in the mirror (the bundle), and no index
    message = failure(setup(lock=lock_text(uv_file).replace(uv_file["filename"], missing)))
    assert f"{missing} (uv==0.13.8): " in message
    assert f"/{missing}: no such file" in message
    assert nothing_under(setup.root)


def test_a_python_the_host_cannot_provide_fails_before_the_stack_is_made(setup, uv_file):
    message = failure(setup(profile_changes={"python": "3.9"}, lock=lock_text(uv_file, requires=">=3.9")))
    assert message.startswith(
        "localhost: the profile stable needs Python 3.9 and the host has none that uv finds"
    )
    assert message.endswith("Nothing was created under " + str(setup.root) + ".")
    assert nothing_under(setup.root)

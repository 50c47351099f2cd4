"""Lock files: build, validate, drift, wheels that can or cannot be had (module_utils/stack_lock)."""

from __future__ import annotations

import copy
import hashlib
import re
import sys
from pathlib import Path

import pytest
from ansible.module_utils.python_dists import canonical_name, probe_distributions
from ansible.module_utils.stack_lock import (
    LockError,
    build_lock,
    drift,
    hashed_requirements,
    missing_wheels,
    parse_wheel_filename,
    repair,
    store_listing,
    validate_lock,
    wanted_by_facts,
    wanted_by_lock,
    wheel_index,
    wheel_sources,
)

SHA_A, SHA_B, SHA_C = "a" * 64, "b" * 64, "c" * 64
STORE = {
    "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl": SHA_A,
    "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl": SHA_B,
    "six-1.17.0-py2.py3-none-any.whl": SHA_C,
    "README.txt": "0" * 64,
}
FACTS = {
    "captured_from": "gpu-1", "captured_at": "2026-12-01T00:00:00Z", "profile": "stable",
    "stack": {"name": "stable-0123456789ab", "fingerprint": "0123456789ab" + "0" * 52},
    "target_capabilities": ["12.0"], "cuda": {"toolkit_version": "13.0"},
    "driver": {"version": None, "cuda_driver_version": None},
    "torch": {"version": "2.14.1", "git_version": "deadbeef", "cuda_version": "13.0",
              "index_url": "https://download.pytorch.org/whl/cu130"},
    "sgl_kernel": {"package": "sglang-kernel", "version": "0.4.10", "build_fingerprint": None},
    "sglang": {"version": "0.5.23"}, "unit": {"path": "/etc/systemd/system/sglang@.service", "sha256": SHA_C},
    "distributions": [
        {"name": "Six", "version": "1.17.0", "record_sha256": SHA_B},
        {"name": "torch", "version": "2.14.1", "record_sha256": SHA_A},
    ],
}


@pytest.fixture
def lock():
    return build_lock("prod", FACTS, STORE)


@pytest.mark.parametrize(("filename", "expected"), [
    ("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", ("torch", "2.14.1")),
    ("sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl", ("sglang-kernel", "0.4.10")),
    ("Foo.Bar-1.0-1-py3-none-any.whl", ("foo-bar", "1.0")),  # with a build tag
    ("torch-2.14.1.tar.gz", None),
    ("not-a-wheel.whl", None),
])
def test_parse_wheel_filename(filename, expected):
    assert parse_wheel_filename(filename) == expected


def test_wheel_index_groups_every_platform_of_a_version():
    index = wheel_index(STORE)
    assert [w["sha256"] for w in index[("torch", "2.14.1")]] == [SHA_A, SHA_B]
    assert ("readme-txt", "") not in index
    assert len(index) == 2


def test_build_lock_records_wheels_and_sections(lock):
    assert lock["lock_version"] == 1
    assert lock["name"] == "prod"
    assert [d["name"] for d in lock["distributions"]] == ["six", "torch"]
    six, torch = lock["distributions"]
    assert six["wheels"] == [{"file": "six-1.17.0-py2.py3-none-any.whl", "sha256": SHA_C}]
    assert len(torch["wheels"]) == 2
    assert lock["torch"]["wheel_sha256"] == [SHA_A, SHA_B]
    assert lock["sgl_kernel"]["wheel_sha256"] == []  # its wheel is not in the store
    assert validate_lock(lock) is lock
    # the facts given are not modified by building
    assert "wheel_sha256" not in FACTS["torch"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda lk: lk.update(lock_version=2), "lock_version 2"),
    (lambda lk: lk.pop("unit"), "lacks unit"),
    (lambda lk: lk.update(extra=1), "unknown keys extra"),
    (lambda lk: lk.update(distributions=[]), "lists no Python distributions"),
    (lambda lk: lk["distributions"][0].pop("version"), "distributions[0] needs a name and a version"),
    (lambda lk: lk["distributions"][0]["wheels"][0].update(sha256="xyz"), "has no valid sha256"),
])
def test_validate_lock_rejects(lock, edit, message):
    edit(lock)
    with pytest.raises(LockError, match=re.escape(message)):
        validate_lock(lock)


def test_validate_lock_rejects_a_non_mapping():
    with pytest.raises(LockError, match="not a mapping"):
        validate_lock(["x"])


def test_no_drift_against_the_facts_it_was_built_from(lock):
    assert drift(lock, FACTS) == []


@pytest.mark.parametrize(("edit", "item", "words"), [
    (lambda f: f["torch"].update(version="2.15.0"), "torch.version", "torch version is '2.15.0'"),
    (lambda f: f["unit"].update(sha256=SHA_A), "unit.sha256", "model unit file hash"),
    (lambda f: f.update(target_capabilities=["12.0", "10.0"]), "target_capabilities", "target capabilities"),
    (lambda f: f["distributions"][0].update(version="1.16.0"), "distribution six",
     "six is 1.16.0, the lock has 1.17.0"),
    (lambda f: f["distributions"][0].update(record_sha256=SHA_C), "distribution six", "RECORD differs"),
    (lambda f: f["distributions"].pop(0), "distribution six", "locked but not installed"),
    (lambda f: f["distributions"].append({"name": "Extra_Pkg", "version": "1"}), "distribution extra-pkg",
     "installed but not in the lock"),
])
def test_drift_names_what_changed(lock, edit, item, words):
    current = copy.deepcopy(FACTS)
    edit(current)
    found = drift(lock, current)
    assert [d["item"] for d in found] == [item]
    assert words in found[0]["message"]


def test_missing_wheels(lock):
    assert missing_wheels(lock, STORE) == []
    store = dict(STORE)
    del store["six-1.17.0-py2.py3-none-any.whl"]
    store["torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"] = SHA_C
    problems = missing_wheels(lock, store)
    assert problems[0] == "six==1.17.0: six-1.17.0-py2.py3-none-any.whl is no longer in the wheel cache"
    assert problems[1:] == []  # torch still has its cp312 wheel with the recorded hash
    del store["torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"]
    assert "has another sha256" in missing_wheels(lock, store)[1]
    lock["distributions"][0]["wheels"] = []
    assert "records no wheel" in missing_wheels(lock, STORE)[0]


def test_hashed_requirements(lock):
    lines = hashed_requirements(lock).splitlines()
    assert lines[0] == f"six==1.17.0 --hash=sha256:{SHA_C}"
    assert lines[1] == f"torch==2.14.1 --hash=sha256:{SHA_A} --hash=sha256:{SHA_B}"


def test_store_listing_hashes_only_wheels(tmp_path):
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub.whl").mkdir()
    listing = store_listing(str(tmp_path), lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest())
    assert listing == {"a-1.0-py3-none-any.whl": hashlib.sha256(b"wheel").hexdigest()}


def test_canonical_name():
    assert canonical_name("Sglang_Kernel") == canonical_name("sglang.kernel") == "sglang-kernel"


def test_probe_lists_this_interpreters_distributions():
    facts = probe_distributions(sys.executable)
    names = [d["name"] for d in facts["distributions"]]
    assert names == sorted(names)
    assert {"ansible-core", "pytest", "pyyaml"} <= set(names)
    pytest_entry = next(d for d in facts["distributions"] if d["name"] == "pytest")
    assert pytest_entry["version"] == pytest.__version__
    assert len(pytest_entry["record_sha256"]) == 64


KERNEL_FP = "wheel-" + "d" * 64
KERNEL_BUILD = "sglang_kernel-0.4.10-cp310-abi3-linux_x86_64.whl"
KERNEL_RELEASED = "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl"


def kernel_facts():
    facts = copy.deepcopy(FACTS)
    facts["sgl_kernel"]["build_fingerprint"] = KERNEL_FP
    facts["distributions"].append({"name": "sglang_kernel", "version": "0.4.10", "record_sha256": SHA_A})
    return facts


def test_build_lock_takes_the_kernel_from_its_artifact_store_only():
    store = dict(STORE, **{KERNEL_RELEASED: SHA_B})  # the released wheel of that version: another build
    lock = build_lock("prod", kernel_facts(), store, {KERNEL_BUILD: SHA_C})
    kernel = next(d for d in lock["distributions"] if d["name"] == "sglang-kernel")
    assert kernel["wheels"] == [{"file": KERNEL_BUILD, "sha256": SHA_C}]
    assert lock["sgl_kernel"]["wheel_sha256"] == [SHA_C]
    # without an artifact store, the wheel cache's file of that name and version is taken
    plain = build_lock("prod", kernel_facts(), store)
    assert next(d for d in plain["distributions"] if d["name"] == "sglang-kernel")["wheels"] == [
        {"file": KERNEL_RELEASED, "sha256": SHA_B}]
    # a kernel with no build fingerprint is not looked for in the artifact store
    facts = kernel_facts()
    facts["sgl_kernel"]["build_fingerprint"] = None
    assert build_lock("prod", facts, store, {KERNEL_BUILD: SHA_C})["sgl_kernel"]["wheel_sha256"] == [SHA_B]


def test_wheel_sources_names_the_store_of_each_wheel():
    lock = build_lock("prod", kernel_facts(), STORE, {KERNEL_BUILD: SHA_C})
    usable, problems = wheel_sources(lock, STORE, {KERNEL_BUILD: SHA_C})
    assert problems == []
    assert {(w["name"], w["file"], w["store"]) for w in usable} == {
        ("six", "six-1.17.0-py2.py3-none-any.whl", "wheel_cache"),
        ("torch", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "wheel_cache"),
        ("torch", "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl", "wheel_cache"),
        ("sglang-kernel", KERNEL_BUILD, "kernel_store")}
    # the kernel build's file in the wheel cache does not count: it must be in the artifact store
    usable, problems = wheel_sources(lock, dict(STORE, **{KERNEL_BUILD: SHA_C}), {})
    assert problems == [f"sglang-kernel==0.4.10: {KERNEL_BUILD} is no longer in the kernel artifact store"]
    assert "sglang-kernel" not in {w["name"] for w in usable}
    assert missing_wheels(lock, STORE, {KERNEL_BUILD: SHA_A}) == [
        f"sglang-kernel==0.4.10: {KERNEL_BUILD} in the kernel artifact store has another sha256 than "
        "the lock records"]


def test_drift_scope_tells_the_stack_from_the_host(lock):
    current = copy.deepcopy(FACTS)
    current["driver"]["version"] = "580.95"
    current["torch"]["version"] = "2.15.0"
    current["stack"]["python"] = "3.11.2"
    scopes = {d["item"]: d["scope"] for d in drift(lock, current)}
    assert scopes == {"driver.version": "host", "torch.version": "stack", "stack.python": "stack"}


def test_store_listing_hashes_only_the_wanted_wheels(tmp_path, lock):
    for name in ("six-1.17.0-py2.py3-none-any.whl", "six-1.16.0-py2.py3-none-any.whl",
                 "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"):
        (tmp_path / name).write_bytes(name.encode())
    hashed = []

    def digest(path):
        hashed.append(Path(path).name)
        return SHA_A
    wanted = ["six-1.17.0-py2.py3-none-any.whl", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"]
    assert sorted(store_listing(str(tmp_path), digest, wanted_by_facts(FACTS))) == wanted
    assert sorted(hashed) == wanted
    assert sorted(store_listing(str(tmp_path), digest, wanted_by_lock(lock))) == wanted


@pytest.mark.parametrize(("edit", "reinstall", "in_place"), [
    (lambda f: None, [], True),
    (lambda f: f["distributions"][0].update(version="1.16.0"), ["six"], True),
    # the same version from other files: uv pip sync alone keeps it, so it is named for a reinstall
    (lambda f: f["distributions"][0].update(record_sha256=SHA_C), ["six"], True),
    (lambda f: f["distributions"].pop(0), ["six"], True),
    # installed but not in the lock: the sync removes it, no wheel needed
    (lambda f: f["distributions"].append({"name": "Extra_Pkg", "version": "1"}), [], True),
    # torch.version drifts with the torch distribution: both go with the reinstall
    (lambda f: (f["torch"].update(version="2.15.0"), f["distributions"][1].update(version="2.15.0")),
     ["torch"], True),
    (lambda f: (f["distributions"][0].update(version="1.16.0"), f["distributions"][1].update(version="2")),
     ["six", "torch"], True),
    # the host's own drift (the driver) is not the stack's: still in place
    (lambda f: (f["driver"].update(version="580.95"), f["distributions"][0].update(version="1.16.0")),
     ["six"], True),
    # drift a sync cannot put back, or another stack in use: every wheel of the lock
    (lambda f: (f["stack"].update(python="3.11.2"), f["distributions"][0].update(version="1.16.0")),
     ["six"], False),
    (lambda f: f.update(target_capabilities=["12.0", "10.0"]), [], False),
    (lambda f: f["stack"].update(fingerprint="f" * 64), [], False),
    (lambda f: f["stack"].update(name="stable-fedcba987654"), [], False),
    (lambda f: (f["stack"].update(name="stable-fedcba987654"), f["distributions"].pop(1)), ["torch"], False),
])
def test_repair_names_what_to_reinstall_and_whether_the_stack_in_use_is_mended_in_place(
        lock, edit, reinstall, in_place):
    current = copy.deepcopy(FACTS)
    edit(current)
    assert repair(lock, current, drift(lock, current)) == {"reinstall": reinstall, "in_place": in_place}


@pytest.mark.parametrize(("item", "in_place"), [
    ("torch.version", True), ("torch.git_version", True), ("sgl_kernel.version", True),
    ("sgl_kernel.build_fingerprint", True), ("sglang.version", True),
    ("stack.fingerprint", False), ("stack.python", False), ("target_capabilities", False),
])
def test_repair_in_place_only_for_stack_facts_that_follow_the_distributions(lock, item, in_place):
    found = [{"item": item, "locked": "a", "found": "b", "scope": "stack", "message": "m"}]
    assert repair(lock, FACTS, found) == {"reinstall": [], "in_place": in_place}

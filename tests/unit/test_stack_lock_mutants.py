"""module_utils/stack_lock: the details the mutation run (bench/mutation_score.py) found untested.

Whole records instead of fragments: the lock build_lock writes, validate_lock's messages, drift entries,
the usable wheels of wheel_sources, the hashed requirements, and the wheel file name rules.
"""

from __future__ import annotations

import copy

import pytest
from ansible.module_utils import stack_lock
from ansible.module_utils.stack_lock import (
    LockError,
    build_lock,
    drift,
    hashed_requirements,
    missing_wheels,
    parse_wheel_filename,
    store_listing,
    validate_lock,
    wanted_by_facts,
    wanted_by_lock,
    wheel_index,
    wheel_sources,
)

SHA_A, SHA_B, SHA_C = "a" * 64, "b" * 64, "c" * 64
TORCH_WHL = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
SIX_WHL = "six-1.17.0-py2.py3-none-any.whl"
SGLANG_WHL = "sglang-0.5.23-py3-none-any.whl"
KERNEL_WHL = "sglang_kernel-0.4.10-cp310-abi3-linux_x86_64.whl"
STORE = {TORCH_WHL: SHA_A, SIX_WHL: SHA_C, SGLANG_WHL: SHA_B}


def facts():
    return {
        "captured_from": "gpu-1", "captured_at": "2026-12-01T00:00:00Z", "profile": "stable",
        "stack": {"name": "stable-0123456789ab", "fingerprint": "f" * 64, "python": "3.11.2"},
        "target_capabilities": ["12.0"], "cuda": {"toolkit_version": "13.0"},
        "driver": {"version": "580.95.05"},
        "torch": {"version": "2.14.1", "git_version": "deadbeef"},
        "sgl_kernel": {"package": "sglang-kernel", "version": "0.4.10",
                       "build_fingerprint": "wheel-" + "d" * 64},
        "sglang": {"version": "0.5.23"},
        "unit": {"sha256": SHA_C},
        "distributions": [
            {"name": "torch", "version": "2.14.1", "record_sha256": SHA_A},
            {"name": "Six", "version": "1.17.0"},
            {"name": "sglang_kernel", "version": "0.4.10", "record_sha256": SHA_B},
            {"name": "sglang", "version": "0.5.23", "record_sha256": SHA_C},
        ],
    }


@pytest.fixture
def lock():
    return build_lock("prod", facts(), STORE, {KERNEL_WHL: SHA_A})


def test_build_lock_whole_record(lock):
    source = facts()
    assert lock == {
        "lock_version": 1, "name": "prod",
        "captured_from": "gpu-1", "captured_at": "2026-12-01T00:00:00Z", "profile": "stable",
        "stack": source["stack"], "target_capabilities": ["12.0"], "cuda": {"toolkit_version": "13.0"},
        "driver": {"version": "580.95.05"},
        "torch": {"version": "2.14.1", "git_version": "deadbeef", "wheel_sha256": [SHA_A]},
        "sgl_kernel": dict(source["sgl_kernel"], wheel_sha256=[SHA_A]),
        "sglang": {"version": "0.5.23", "wheel_sha256": [SHA_B]},
        "unit": {"sha256": SHA_C},
        "distributions": [
            {"name": "sglang", "version": "0.5.23", "record_sha256": SHA_C,
             "wheels": [{"file": SGLANG_WHL, "sha256": SHA_B}]},
            {"name": "sglang-kernel", "version": "0.4.10", "record_sha256": SHA_B,
             "wheels": [{"file": KERNEL_WHL, "sha256": SHA_A}]},
            {"name": "six", "version": "1.17.0", "record_sha256": None,
             "wheels": [{"file": SIX_WHL, "sha256": SHA_C}]},
            {"name": "torch", "version": "2.14.1", "record_sha256": SHA_A,
             "wheels": [{"file": TORCH_WHL, "sha256": SHA_A}]},
        ],
    }
    assert validate_lock(lock) is lock


def test_build_lock_copies_sections_and_keeps_missing_ones_none():
    given = facts()
    del given["unit"]
    given["sglang"] = {"version": ""}  # no version: no wheel looked up
    built = build_lock("x", given, STORE)
    assert built["unit"] is None
    assert built["sglang"] == {"version": ""}
    assert built["stack"] == given["stack"]
    assert built["stack"] is not given["stack"]
    assert "wheel_sha256" not in given["torch"]
    # without a kernel store the kernel's wheels come from the wheel cache (none there)
    assert built["sgl_kernel"]["wheel_sha256"] == []
    assert next(d for d in built["distributions"] if d["name"] == "sglang-kernel")["wheels"] == []


def test_build_lock_without_distributions():
    given = facts()
    del given["distributions"]
    assert build_lock("x", given, {})["distributions"] == []


def test_kernel_package_needs_a_package_and_a_fingerprint():
    both = {"sgl_kernel": {"package": "Sglang_Kernel", "build_fingerprint": "w"}}
    assert stack_lock._kernel_package(both) == "sglang-kernel"
    assert stack_lock._kernel_package({"sgl_kernel": {"package": "sglang-kernel"}}) is None
    assert stack_lock._kernel_package({"sgl_kernel": {"build_fingerprint": "w"}}) is None
    assert stack_lock._kernel_package({"sgl_kernel": None}) is None
    assert stack_lock._kernel_package({}) is None


@pytest.mark.parametrize(("filename", "expected"), [
    ("a-1.0-py3-none-any.whl", ("a", "1.0")),
    ("a-1.0-12abc-py3-none-any.whl", ("a", "1.0")),  # build tag
    ("a-1.0-abc-py3-none-any.whl", None),  # a build tag starts with a digit
    ("a-1.0-py3-none-any.whlx", None),
    ("xa-1.0-py3-none-any.whl.bak", None),
    ("a-1.0-py3-none.whl", None),
    ("-1.0-py3-none-any.whl", None),
])
def test_parse_wheel_filename_edges(filename, expected):
    assert parse_wheel_filename(filename) == expected


def test_wheel_index_of_nothing():
    assert wheel_index(None) == {}
    assert wheel_index({"b-1-py3-none-any.whl": SHA_B, "B-1-py3-none-any.whl": SHA_A}) == {
        ("b", "1"): [{"file": "B-1-py3-none-any.whl", "sha256": SHA_A},
                     {"file": "b-1-py3-none-any.whl", "sha256": SHA_B}]}


def test_get_stops_at_a_value_that_is_no_mapping():
    assert stack_lock._get({"a": {"b": 1}}, "a.b") == 1
    assert stack_lock._get({"a": None}, "a.b") is None
    assert stack_lock._get({"a": "text"}, "a.b") is None


@pytest.mark.parametrize(("edit", "message"), [
    (lambda lk: lk.update(lock_version=2),
     "lock has lock_version 2; this project reads version 1: take a new snapshot with "
     "playbooks/snapshot.yml"),
    (lambda lk: lk.pop("lock_version"),
     "lock has lock_version None; this project reads version 1: take a new snapshot with "
     "playbooks/snapshot.yml"),
    (lambda lk: (lk.pop("unit"), lk.pop("cuda")),
     "lock lacks cuda, unit; take a new snapshot with playbooks/snapshot.yml"),
    (lambda lk: lk.update(zz=1, extra=2),
     "lock has unknown keys extra, zz; a lock is written by playbooks/snapshot.yml and not edited by hand"),
    (lambda lk: lk.update(distributions={"six": "1"}), "lock lists no Python distributions"),
    (lambda lk: lk.update(distributions=[]), "lock lists no Python distributions"),
    (lambda lk: lk["distributions"].append("six"), "lock: distributions[4] needs a name and a version"),
    (lambda lk: lk["distributions"][1].update(name=""), "lock: distributions[1] needs a name and a version"),
    (lambda lk: lk["distributions"][1]["wheels"][0].pop("sha256"),
     f"lock: sglang-kernel wheel '{KERNEL_WHL}' has no valid sha256"),
    (lambda lk: lk["distributions"][1]["wheels"][0].update(sha256=SHA_A.upper()),
     f"lock: sglang-kernel wheel '{KERNEL_WHL}' has no valid sha256"),
    (lambda lk: lk["distributions"][1]["wheels"][0].update(sha256=SHA_A + "0"),
     f"lock: sglang-kernel wheel '{KERNEL_WHL}' has no valid sha256"),
])
def test_validate_lock_messages(lock, edit, message):
    edit(lock)
    with pytest.raises(LockError) as info:
        validate_lock(lock)
    assert str(info.value) == message


def test_validate_lock_names_where_and_accepts_a_distribution_without_wheels(lock):
    with pytest.raises(LockError) as info:
        validate_lock("text", "locks/prod.lock.yml")
    assert str(info.value) == ("locks/prod.lock.yml is not a mapping; it must be a file written by "
                               "playbooks/snapshot.yml")
    lock["distributions"][0]["wheels"] = None
    assert validate_lock(lock) is lock


def test_drift_whole_entries(lock):
    current = facts()
    current["driver"]["version"] = "590.1"
    current["stack"]["python"] = "3.12.1"
    current["distributions"] = [
        {"name": "torch", "version": "2.15.0"},
        {"name": "six", "version": "1.17.0", "record_sha256": SHA_A},  # the lock has no RECORD hash: no drift
        {"name": "sglang_kernel", "version": "0.4.10", "record_sha256": SHA_C},
        {"name": "New", "version": "1"},
    ]
    assert drift(lock, current) == [
        {"item": "stack.python", "locked": "3.11.2", "found": "3.12.1", "scope": "stack",
         "message": "stack Python version is '3.12.1', the lock has '3.11.2'"},
        {"item": "driver.version", "locked": "580.95.05", "found": "590.1", "scope": "host",
         "message": "driver version is '590.1', the lock has '580.95.05'"},
        {"item": "distribution new", "locked": None, "found": "1", "scope": "stack",
         "message": "new 1 is installed but not in the lock"},
        {"item": "distribution sglang", "locked": "0.5.23", "found": None, "scope": "stack",
         "message": "sglang 0.5.23 is locked but not installed"},
        {"item": "distribution sglang-kernel", "locked": "0.4.10", "found": "0.4.10", "scope": "stack",
         "message": "sglang-kernel 0.4.10 was reinstalled from other files (its RECORD differs from the "
                    "lock's)"},
        {"item": "distribution torch", "locked": "2.14.1", "found": "2.15.0", "scope": "stack",
         "message": "torch is 2.15.0, the lock has 2.14.1"},
    ]


def test_drift_of_a_host_without_distributions(lock):
    current = facts()
    del current["distributions"]
    assert [d["item"] for d in drift(lock, current)] == [
        "distribution sglang", "distribution sglang-kernel", "distribution six", "distribution torch"]
    lock["distributions"] = None
    assert drift(lock, current) == []


@pytest.mark.parametrize("path", [p for p, _ in stack_lock.TRACKED])
def test_drift_of_every_tracked_fact(lock, path):
    current = copy.deepcopy(lock)
    *parents, key = path.split(".")
    node = current
    for parent in parents:
        node = node[parent]
    node[key] = "changed"
    found = drift(lock, current)
    assert [d["item"] for d in found] == [path]
    assert found[0]["scope"] == ("host" if path in ("cuda.toolkit_version", "driver.version", "unit.sha256")
                                 else "stack")


def test_wheel_sources_whole_records(lock):
    usable, problems = wheel_sources(lock, STORE, {KERNEL_WHL: SHA_A})
    assert problems == []
    assert usable == [
        {"name": "sglang", "version": "0.5.23", "file": SGLANG_WHL, "sha256": SHA_B, "store": "wheel_cache"},
        {"name": "sglang-kernel", "version": "0.4.10", "file": KERNEL_WHL, "sha256": SHA_A,
         "store": "kernel_store"},
        {"name": "six", "version": "1.17.0", "file": SIX_WHL, "sha256": SHA_C, "store": "wheel_cache"},
        {"name": "torch", "version": "2.14.1", "file": TORCH_WHL, "sha256": SHA_A, "store": "wheel_cache"},
    ]


def test_wheel_sources_problems_word_for_word(lock):
    lock["distributions"][0]["wheels"] = []
    lock["distributions"][3]["wheels"].append({"file": "torch-2.14.1-cp312-cp312-any.whl", "sha256": SHA_B})
    store = {SIX_WHL: SHA_A}
    usable, problems = wheel_sources(lock, store, {})
    assert usable == []
    assert problems == [
        "sglang==0.5.23: the lock records no wheel for it (it was not in the wheel cache when the snapshot "
        "was taken)",
        f"sglang-kernel==0.4.10: {KERNEL_WHL} is no longer in the kernel artifact store",
        f"six==1.17.0: {SIX_WHL} in the wheel cache has another sha256 than the lock records",
        f"torch==2.14.1: {TORCH_WHL}, torch-2.14.1-cp312-cp312-any.whl is no longer in the wheel cache",
    ]
    lock["distributions"][1]["wheels"] = []
    assert missing_wheels(lock, store, {})[1] == (
        "sglang-kernel==0.4.10: the lock records no wheel for it (it was not in the kernel artifact store "
        "when the snapshot was taken)")
    # without a kernel store, the kernel is looked for in the wheel cache
    assert missing_wheels(lock, store)[1].startswith("sglang-kernel==0.4.10: the lock records no wheel "
                                                     "for it (it was not in the wheel cache")


def test_wheel_sources_several_present_with_other_hashes(lock):
    lock["distributions"][3]["wheels"].append({"file": "t2.whl", "sha256": SHA_B})
    problems = wheel_sources(lock, {TORCH_WHL: SHA_C, "t2.whl": SHA_C}, {})[1]
    assert problems[-1] == f"torch==2.14.1: {TORCH_WHL}, t2.whl in the wheel cache has another sha256 than " \
                           "the lock records"


def test_hashed_requirements_whole_text(lock):
    lock["distributions"][2]["wheels"] = []
    del lock["distributions"][0]["wheels"]
    assert hashed_requirements(lock) == (
        "sglang==0.5.23\n"
        f"sglang-kernel==0.4.10 --hash=sha256:{SHA_A}\n"
        "six==1.17.0\n"
        f"torch==2.14.1 --hash=sha256:{SHA_A}\n")


def test_store_listing_without_a_filter(tmp_path):
    for name in ("b-1-py3-none-any.whl", "a-1-py3-none-any.whl", "c.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d-1-py3-none-any.whl").write_text("d")
    seen = []

    def digest(path):
        seen.append(path)
        return path

    listing = store_listing(str(tmp_path), digest)
    assert listing == {"a-1-py3-none-any.whl": str(tmp_path / "a-1-py3-none-any.whl"),
                       "b-1-py3-none-any.whl": str(tmp_path / "b-1-py3-none-any.whl")}
    assert seen == [str(tmp_path / "a-1-py3-none-any.whl"), str(tmp_path / "b-1-py3-none-any.whl")]


def test_wanted_filters(lock):
    by_facts = wanted_by_facts({"distributions": [{"name": "Six", "version": "1.17.0"}]})
    assert by_facts(SIX_WHL)
    assert not by_facts("six-1.16.0-py3-none-any.whl")
    assert not by_facts("six.txt")
    assert not wanted_by_facts({})(SIX_WHL)
    lock["distributions"][0]["wheels"] = None
    by_lock = wanted_by_lock(lock)
    assert by_lock(SIX_WHL)
    assert by_lock(KERNEL_WHL)
    assert not by_lock(SGLANG_WHL)

"""module_utils/stack_profile: profile schema (cases/stack_profile.yml), targets, fingerprint, retention."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.cuda_arch import ArchError
from ansible.module_utils.stack_profile import (
    ProfileError,
    canonical_json,
    constraints,
    cuda_tag_version,
    fingerprint,
    fingerprint_inputs,
    free_space,
    resolve_targets,
    stack_name,
    stacks_to_prune,
    validate_profile,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
STABLE = yaml.safe_load((REPO_ROOT / "profiles" / "stable.yml").read_text())
CASES = yaml.safe_load((Path(__file__).parent / "cases" / "stack_profile.yml").read_text())["cases"]


def changed(profile, settings):
    profile = copy.deepcopy(profile)
    for dotted, value in (settings or {}).items():
        *parents, key = dotted.split(".")
        node = profile
        for parent in parents:
            node = node[parent]
        if value is None:
            del node[key]
        else:
            node[key] = value
    return profile


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_profile_case(case):
    profile = changed(STABLE, case.get("set"))
    if case.get("ok"):
        assert validate_profile(profile, "profiles/stable.yml") is profile
        return
    with pytest.raises(ProfileError) as info:
        validate_profile(profile, "profiles/stable.yml")
    message = str(info.value)
    assert message.startswith("profiles/stable.yml: "), message
    for fragment in case["error"]:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO_ROOT / "profiles").glob("*.yml")))
def test_shipped_profiles_are_valid_and_named_after_their_file(name):
    profile = yaml.safe_load((REPO_ROOT / "profiles" / f"{name}.yml").read_text())
    validate_profile(profile, name)
    assert profile["name"] == name


def test_nightly_is_a_dated_nightly_with_a_source_kernel():
    nightly = yaml.safe_load((REPO_ROOT / "profiles" / "nightly.yml").read_text())
    assert "/nightly/" in nightly["torch"]["index_url"]
    assert ".dev20" in nightly["torch"]["version"]
    assert nightly["sgl_kernel"]["install"] == "source"


@pytest.mark.parametrize(("tag", "version"), [("cu130", "13.0"), ("cu128", "12.8"), ("cu1210", "121.0"),
                                              ("cpu", None), ("rocm6.4", None), ("", None)])
def test_cuda_tag_version(tag, version):
    assert cuda_tag_version(tag) == version


@pytest.mark.parametrize(("inventory", "gpus", "targets", "source"), [
    ("12.0", [], ["12.0"], "inventory"),
    ("9.0", ["12.0"], ["9.0"], "inventory"),          # the inventory wins (preflight checks they agree)
    ("", ["12.0", "9.0", "12.0"], ["9.0", "12.0"], "gpu"),
    (None, [], ["10.0", "12.0"], "default"),
])
def test_resolve_targets(inventory, gpus, targets, source):
    got, got_source, notice = resolve_targets(inventory, gpus)
    assert (got, got_source) == (targets, source)
    assert (notice is not None) == (source == "default")
    if notice:
        assert "10.0, 12.0" in notice
        assert "gpu_capability" in notice


def test_resolve_targets_rejects_a_bad_capability():
    with pytest.raises(ArchError, match="gpu_capability"):
        resolve_targets("12.0a", [])


def stable_fingerprint(profile=None, targets=("12.0",)):
    return fingerprint(fingerprint_inputs(profile or STABLE, list(targets)))


@pytest.mark.parametrize(("what", "settings"), [
    ("python", {"python": "3.12"}),
    ("torch pin", {"torch.version": "2.14.0"}),
    ("torch index", {"torch.index_url": "https://download.pytorch.org/whl/nightly/cu130"}),
    ("CUDA", {"cuda.version": "13.1"}),
    ("kernel pin", {"sgl_kernel.version": "0.4.9"}),
    ("kernel source ref", {"sgl_kernel.source.ref": "v0.5.22"}),
    ("kernel FA3 setting", {"sgl_kernel.build.enable_fa3": False}),
    ("kernel below-sm90 setting", {"sgl_kernel.build.enable_below_sm90": False}),
    ("kernel CMake args", {"sgl_kernel.build.extra_cmake_args": ["-DSGL_KERNEL_ENABLE_FP4=ON"]}),
    ("kernel install method", {"sgl_kernel.install": "wheel"}),
    ("sglang pin", {"sglang.version": "0.5.22"}),
    ("flashinfer pin", {"flashinfer.version": "0.7.1"}),
])
def test_fingerprint_changes_with_what_decides_the_stack(what, settings):
    assert stable_fingerprint(changed(STABLE, settings)) != stable_fingerprint(), what


@pytest.mark.parametrize(("what", "settings"), [
    ("description", {"description": "other words"}),
    ("gateway", {"smg.version": "1.14.0"}),
    ("uv", {"uv.version": "0.13.9"}),
])
def test_fingerprint_ignores_what_does_not(what, settings):
    assert stable_fingerprint(changed(STABLE, settings)) == stable_fingerprint(), what


def test_fingerprint_of_a_wheel_kernel_ignores_its_source_settings():
    wheel = changed(STABLE, {"sgl_kernel.install": "wheel"})
    assert stable_fingerprint(wheel) == stable_fingerprint(changed(wheel, {"sgl_kernel.source.ref": "main"}))


def test_fingerprint_targets_are_a_set():
    assert stable_fingerprint(targets=["12.0", "10.0"]) == stable_fingerprint(targets=["10.0", "12.0"])
    assert stable_fingerprint(targets=["12.0"]) != stable_fingerprint(targets=["12.0", "10.0"])


def test_fingerprint_is_sha256_of_canonical_json():
    # Key order and whitespace never change a digest: a changed digest renames every stack on every host.
    inputs = {"torch": {"version": "2.14.1", "cuda_tag": "cu130"}, "python": "3.11", "targets": ["12.0"]}
    text = '{"python":"3.11","targets":["12.0"],"torch":{"cuda_tag":"cu130","version":"2.14.1"}}'
    assert canonical_json(inputs) == text
    assert fingerprint(inputs) == hashlib.sha256(text.encode()).hexdigest()
    assert fingerprint(dict(reversed(list(inputs.items())))) == fingerprint(inputs)


def test_stack_name():
    assert stack_name("stable", "0123456789abcdef" * 4) == "stable-0123456789ab"


def test_constraints_pin_the_profile():
    assert constraints(STABLE) == ["torch==2.14.1", "sglang-kernel==0.4.10", "sglang==0.5.23",
                                   "flashinfer-python==0.7.2"]


def test_free_space_measures_the_nearest_existing_parent(tmp_path):
    where, free = free_space(str(tmp_path / "not" / "yet"))
    assert where == str(tmp_path)
    assert free > 0


S = "stable-"


@pytest.mark.parametrize(("stacks", "current", "keep", "protect", "remove"), [
    ([(S + "a" * 12, 3), (S + "b" * 12, 2), (S + "c" * 12, 1)], S + "a" * 12, 1, [], [S + "c" * 12]),
    # the current stack is never removed, even when it is the oldest
    ([(S + "a" * 12, 3), (S + "b" * 12, 2), (S + "c" * 12, 1)], S + "c" * 12, 1, [], [S + "b" * 12]),
    ([(S + "a" * 12, 3), (S + "b" * 12, 2)], S + "a" * 12, 0, [], [S + "b" * 12]),
    ([(S + "a" * 12, 3), (S + "b" * 12, 2)], S + "a" * 12, 0, [S + "b" * 12], []),
    ([(S + "a" * 12, 3), ("wheels", 9), ("current", 9)], None, 0, [], [S + "a" * 12]),
    # the protected stacks count among the `keep` (a rollout protects the stack it may roll back to):
    # keep 2 leaves current, the protected previous stack and one more, not two more
    ([(S + "9" * 12, 5), (S + "8" * 12, 4), (S + "c" * 12, 3), (S + "b" * 12, 2), (S + "a" * 12, 1)],
     S + "9" * 12, 2, [S + "9" * 12, S + "8" * 12], [S + "a" * 12, S + "b" * 12]),
    # an older protected stack: kept, and only the newest unprotected one beside it
    ([(S + "9" * 12, 5), (S + "c" * 12, 3), (S + "b" * 12, 2), (S + "8" * 12, 1)],
     S + "9" * 12, 2, [S + "8" * 12], [S + "b" * 12]),
    # protected beyond keep: kept all the same, every other old stack removed
    ([(S + "9" * 12, 5), (S + "8" * 12, 4), (S + "7" * 12, 3), (S + "b" * 12, 2)],
     S + "9" * 12, 1, [S + "8" * 12, S + "7" * 12], [S + "b" * 12]),
    ([(S + "9" * 12, 5), (S + "8" * 12, 4), (S + "c" * 12, 3), (S + "b" * 12, 2)],
     S + "9" * 12, 0, [S + "8" * 12], [S + "b" * 12, S + "c" * 12]),
    # exactly keep protected stacks: nothing else stays
    ([(S + "9" * 12, 5), (S + "8" * 12, 4), (S + "c" * 12, 3)], S + "9" * 12, 1, [S + "8" * 12],
     [S + "c" * 12]),
    # a protected name that is no stack here (or the current one) takes no place
    ([(S + "9" * 12, 5), (S + "c" * 12, 3), (S + "b" * 12, 2), (S + "a" * 12, 1)],
     S + "9" * 12, 2, [S + "9" * 12, S + "6" * 12], [S + "a" * 12]),
    # newest by time, not by name
    ([(S + "a" * 12, 1), (S + "b" * 12, 9), (S + "c" * 12, 5), (S + "d" * 12, 7)], S + "b" * 12, 1, [],
     [S + "a" * 12, S + "c" * 12]),
])
def test_stacks_to_prune(stacks, current, keep, protect, remove):
    assert stacks_to_prune(stacks, current, keep, protect) == remove


def test_stacks_to_prune_rejects_a_negative_keep():
    with pytest.raises(ValueError, match="stack_keep"):
        stacks_to_prune([], None, -1)

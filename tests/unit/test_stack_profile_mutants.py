"""module_utils/stack_profile: the details the mutation run (bench/mutation_score.py) found untested.

Exact messages of the schema check, the schema leaf records, the fingerprint's inputs key by key, the
canonical JSON's escaping, the torch index channel, target resolution's error prefixes and notice.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import stack_profile
from ansible.module_utils.cuda_arch import ArchError
from ansible.module_utils.stack_profile import (
    FINGERPRINT_VERSION,
    ProfileError,
    canonical_json,
    fingerprint_inputs,
    free_space,
    resolve_targets,
    torch_cuda_problems,
    validate_profile,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
STABLE = yaml.safe_load((REPO_ROOT / "profiles" / "stable.yml").read_text())


def profile(**changes):
    value = copy.deepcopy(STABLE)
    for dotted, new in changes.items():
        *parents, key = dotted.split("__")
        node = value
        for parent in parents:
            node = node[parent]
        if new is None:
            del node[key]
        else:
            node[key] = new
    return value


def problems_of(value, *args):
    with pytest.raises(ProfileError) as info:
        validate_profile(value, *args)
    return str(info.value)


def test_leaf_records_every_setting():
    assert stack_profile._leaf("str") == {"_leaf": True, "kind": "str", "required": True, "choices": None,
                                          "pattern": None}
    assert stack_profile._leaf("list", required=False, choices=("a",), pattern="p") == {
        "_leaf": True, "kind": "list", "required": False, "choices": ("a",), "pattern": "p"}


def test_a_profile_that_is_no_mapping_is_named_the_profile():
    assert problems_of([1]) == "profile: the profile must be a mapping, got list [1]"


def test_a_section_that_is_no_mapping_is_named_by_its_path():
    assert problems_of(profile(cuda="13.0"), "p.yml") == "p.yml: cuda must be a mapping, got str '13.0'"


def test_unknown_top_level_key_without_a_close_match():
    message = problems_of(profile(zzzzqqqq=1), "p.yml")
    assert message == ("p.yml: unknown key 'zzzzqqqq'; known keys: cuda, description, flashinfer, name, "
                       "python, sgl_kernel, sglang, smg, torch, uv")


def test_unknown_nested_key_with_a_close_match_names_its_section():
    message = problems_of(profile(cuda__versoin="13.0"), "p.yml")
    assert message == ("p.yml: unknown key 'cuda.versoin' (did you mean 'cuda.version'?); known keys under "
                       "cuda: version")


def test_unknown_keys_that_are_not_strings_are_reported_with_the_others():
    value = profile()
    value[1] = "one"
    value["zzzzqqqq"] = "two"
    message = problems_of(value, "p.yml")
    assert "unknown key '1';" in message
    assert "unknown key 'zzzzqqqq';" in message
    assert message.index("unknown key '1'") < message.index("unknown key 'zzzzqqqq'")


def test_every_missing_key_is_reported_not_only_the_first():
    message = problems_of(profile(name=None, uv=None), "p.yml")
    assert message == "p.yml: missing key 'name'; missing key 'uv'"


def test_an_absent_optional_key_does_not_stop_the_check():
    assert "description" not in profile(description=None)
    message = problems_of(profile(description=None, uv__version=3), "p.yml")
    assert message == 'p.yml: uv.version must be a str, got int 3 (quote it: "3")'


def test_a_nested_section_does_not_stop_the_check_of_the_next():
    message = problems_of(profile(cuda__version="13", uv__version=3), "p.yml")
    assert message == ("p.yml: cuda.version has an invalid value '13'; "
                       'uv.version must be a str, got int 3 (quote it: "3")')


def test_quote_hint_only_for_a_number_where_a_string_belongs():
    assert problems_of(profile(sgl_kernel__build__enable_fa3=1), "p.yml") == (
        "p.yml: sgl_kernel.build.enable_fa3 must be a bool, got int 1")
    assert problems_of(profile(uv__version=["0.9"]), "p.yml") == (
        "p.yml: uv.version must be a str, got list ['0.9']")


def test_default_source_name_is_profile():
    assert problems_of(profile(uv=None)) == "profile: missing key 'uv'"


def test_canonical_json_escapes_non_ascii():
    assert canonical_json({"b": "\u00e9", "a": [1, 2]}) == '{"a":[1,2],"b":"\\u00e9"}'


@pytest.mark.parametrize("install", ["wheel", "source", "auto"])
def test_fingerprint_inputs_key_by_key(install):
    value = profile(sgl_kernel__install=install)
    kernel = value["sgl_kernel"]
    expected_kernel = {"package": kernel["package"], "version": kernel["version"], "install": install}
    if install != "wheel":
        expected_kernel.update(source=kernel["source"], build=kernel["build"])
    assert fingerprint_inputs(value, ["12.0", "9.0", "10.0"]) == {
        "fingerprint_version": FINGERPRINT_VERSION,
        "python": value["python"],
        "cuda": value["cuda"]["version"],
        "torch": {"version": value["torch"]["version"], "cuda_tag": value["torch"]["cuda_tag"],
                  "index_url": value["torch"]["index_url"]},
        "sgl_kernel": expected_kernel,
        "sglang": value["sglang"]["version"],
        "flashinfer": value["flashinfer"]["version"],
        # numeric order of capabilities, not string order ("10.0" < "9.0" as strings)
        "targets": ["9.0", "10.0", "12.0"],
    }


def test_free_space_is_blocks_times_block_size(monkeypatch, tmp_path):
    class Stat:
        f_bavail = 3
        f_frsize = 4096

    monkeypatch.setattr(stack_profile.os, "statvfs", lambda path: Stat())
    where, free = free_space(str(tmp_path))
    assert (where, free) == (str(tmp_path), 3 * 4096)
    assert isinstance(free, int)


def test_free_space_measures_the_root_when_nothing_else_exists(monkeypatch):
    class Stat:
        f_bavail = 1
        f_frsize = 512

    monkeypatch.setattr(stack_profile.os.path, "isdir", lambda path: False)
    monkeypatch.setattr(stack_profile.os, "statvfs", lambda path: Stat())
    assert free_space("/a/b") == (os.path.abspath("/"), 512)


@pytest.mark.parametrize(("inventory", "gpus", "defaults", "prefix"), [
    ("sm_120a", (), ("12.0",), "gpu_capability: "),
    (None, ("sm_90a",), ("12.0",), "GPU capability: "),
    (None, (), ("sm_100a",), "default target capabilities: "),
])
def test_resolve_targets_names_the_source_of_a_bad_capability(inventory, gpus, defaults, prefix):
    with pytest.raises(ArchError) as info:
        resolve_targets(inventory, gpus, defaults)
    assert str(info.value).startswith(prefix), str(info.value)


def test_resolve_targets_accepts_capabilities_of_gpus_it_does_not_know():
    assert resolve_targets("13.5") == (["13.5"], "inventory", None)
    assert resolve_targets(None, ["13.5", "9.0"]) == (["9.0", "13.5"], "gpu", None)


def test_resolve_targets_default_notice():
    targets, source, notice = resolve_targets()
    assert (targets, source) == (["10.0", "12.0"], "default")
    assert notice == ("no gpu_capability in the inventory and no GPU seen on this host: targeting the "
                      "default capabilities 10.0, 12.0 (Blackwell); set gpu_capability to build for other "
                      "GPUs")


def test_a_tag_that_is_no_cuda_tag_names_the_reason():
    problems = torch_cuda_problems(profile(torch__cuda_tag="cpu", torch__version="2.9.0+cpu"))
    assert len(problems) == 1
    assert problems[0].endswith("a CPU or ROCm torch cannot run SGLang's CUDA kernels")


@pytest.mark.parametrize(("index_url", "channel"), [
    ("https://download.pytorch.org/whl/cu128/", "cu128"),  # a trailing slash still names the channel
    ("cu128", "cu128"),  # no slash at all: the whole URL is the last segment
])
def test_index_url_channel(index_url, channel):
    problems = torch_cuda_problems(profile(torch__index_url=index_url))
    assert any(f"serves {channel} builds" in p for p in problems), problems


def test_index_url_whose_last_segment_is_no_channel():
    assert torch_cuda_problems(profile(torch__index_url="https://mirror.example/whl/cu128/X")) == []


def test_kernel_build_problems_follow_the_torch_problems_in_one_message():
    bad = profile(torch__cuda_tag="cu128", sgl_kernel__build__extra_cmake_args=["-DX"])
    message = problems_of(bad, "p.yml")
    assert message.startswith("p.yml: torch.cuda_tag cu128 (CUDA 12.8) does not match cuda.version 13.0")
    assert message.endswith("; sgl_kernel.build.extra_cmake_args: '-DX' is not -DNAME=VALUE (one string, no "
                            "space after -D, a name of letters, digits and _ . + -, then =)")


def test_kernel_build_problems_of_good_args_are_none():
    assert stack_profile.kernel_build_problems(profile(sgl_kernel__build__extra_cmake_args=["-DX=1"])) == []
    assert validate_profile(profile(sgl_kernel__build__extra_cmake_args=["-DX=1"]))["sgl_kernel"]["build"][
        "extra_cmake_args"] == ["-DX=1"]

"""The sgl_kernel role's defaults for the profile's sgl_kernel.build keys, rendered by Ansible's templar
with each committed profile and with each key changed: what the role passes to sgl_kernel_build."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = yaml.safe_load((REPO / "roles" / "sgl_kernel" / "defaults" / "main.yml").read_text())
KEYS = ("sgl_kernel_enable_fa3", "sgl_kernel_enable_below_sm90", "sgl_kernel_extra_cmake_args")


def profile(name):
    return yaml.safe_load((REPO / "profiles" / f"{name}.yml").read_text())


def render(stack_profile):
    """The three variables as the role sees them ({} for no stack_profile at all)."""
    role_vars = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in DEFAULTS.items()}
    if stack_profile is not None:
        role_vars["stack_profile_data"] = stack_profile
    templar = Templar(loader=DataLoader(), variables=role_vars)
    return tuple(templar.template(trust_as_template(f"{{{{ {key} }}}}")) for key in KEYS)


def test_the_committed_profiles():
    assert render(profile("stable")) == ("auto", True, [])
    assert render(profile("nightly")) == ("off", False, [])


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("enable_fa3", False, ("off", True, [])),
    ("enable_below_sm90", False, ("auto", False, [])),
    ("extra_cmake_args", ["-DSGL_KERNEL_ENABLE_FP4=ON", "-DX=1"],
     ("auto", True, ["-DSGL_KERNEL_ENABLE_FP4=ON", "-DX=1"])),
])
def test_each_key_changed_reaches_its_variable(key, value, expected):
    changed = copy.deepcopy(profile("stable"))
    changed["sgl_kernel"]["build"][key] = value
    assert render(changed) == expected


def test_nightly_with_fa3_on():
    changed = copy.deepcopy(profile("nightly"))
    changed["sgl_kernel"]["build"]["enable_fa3"] = True
    assert render(changed)[0] == "auto"


@pytest.mark.parametrize("stack_profile", [None, {}, {"sgl_kernel": {}}, {"sgl_kernel": {"build": {}}}])
def test_without_profile_keys_the_role_builds_as_upstream_narrowed(stack_profile):
    assert render(stack_profile) == ("auto", True, [])

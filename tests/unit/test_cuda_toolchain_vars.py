"""The cuda_toolchain role's own expressions (defaults/main.yml, vars/main.yml), rendered by Ansible's
templar with the facts of each supported distribution: NVIDIA's repository URL and the pip layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[2] / "roles" / "cuda_toolchain"


def trusted(value):
    """The role's files are trusted templates, as Ansible treats them when it loads the role."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    return value


def render(expression: str, facts: dict, **overrides) -> object:
    role_vars = {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
                 **yaml.safe_load((ROLE / "vars" / "main.yml").read_text()), **overrides}
    templar = Templar(loader=DataLoader(), variables={**trusted(role_vars), "ansible_facts": facts,
                                                      "stack_profile_data": {"cuda": {"version": "13.0"}}})
    return templar.template(trust_as_template(expression))


def facts(distribution: str, version: str, architecture: str = "x86_64") -> dict:
    return {"distribution": distribution, "distribution_version": version,
            "distribution_major_version": version.partition(".")[0], "architecture": architecture}


@pytest.mark.parametrize(("host", "url"), [
    (facts("Ubuntu", "22.04"), "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"),
    (facts("Ubuntu", "24.04", "aarch64"),
     "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"),
    (facts("Debian", "12.8"), "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"),
])
def test_nvidia_repository_for_each_supported_distribution(host, url):
    assert render("{{ cuda_toolchain_apt_repo_url }}", host) == url
    assert render("{{ cuda_toolchain_apt_keyring_url }}", host) == url + "3bf863cc.pub"


@pytest.mark.parametrize("host", [facts("Ubuntu", "20.04"), facts("Debian", "11"), facts("Rocky", "9.4"),
                                  facts("Debian", "12", "ppc64le")])
def test_no_repository_name_for_other_hosts(host):
    names = [render("{{ __cuda_toolchain_apt_distro }}", host),
             render("{{ __cuda_toolchain_apt_arch }}", host)]
    assert "" in names  # validate.yml then fails with "name no NVIDIA CUDA repository for ..."


def test_a_mirror_replaces_the_base_url():
    assert render("{{ cuda_toolchain_apt_repo_url }}", facts("Ubuntu", "24.04"),
                  cuda_toolchain_apt_base_url="http://mirror.internal/cuda") == \
        "http://mirror.internal/cuda/ubuntu2404/x86_64/"


def test_release_derived_defaults():
    host = facts("Debian", "12")
    assert render("{{ cuda_toolchain_apt_package }}", host) == "cuda-toolkit-13-0"
    assert render("{{ cuda_toolchain_apt_home }}", host) == "/usr/local/cuda-13.0"
    assert render("{{ cuda_toolchain_search_paths }}", host) == ["/usr/local/cuda-13.0", "/usr/local/cuda"]
    assert render("{{ cuda_toolchain_pip_packages['nvidia-cuda-nvcc'] }}", host) == "13.0.88"
    assert render("{{ cuda_toolchain_pip_packages }}", host, cuda_toolchain_cuda_version="12.9") == {}

"""Molecule verify step (testinfra over ssh): the site playbook left an activated stack on every host."""

from __future__ import annotations

import json

STACK_ROOT = "/opt/sglang/stacks"


def _current(host):
    link = host.file(f"{STACK_ROOT}/current")
    assert link.is_symlink
    return f"{STACK_ROOT}/{link.linked_to.rsplit('/', 1)[-1]}"


def test_current_points_at_a_sealed_stack_with_its_manifest(host):
    stack = _current(host)
    manifest = json.loads(host.file(f"{stack}/stack.json").content_string)
    assert stack.endswith("/" + manifest["stack_name"])
    assert manifest["stack_name"] == f"stable-{manifest['fingerprint'][:12]}"
    assert host.file(f"{stack}/.sealed").content_string.strip() == manifest["fingerprint"]
    # no gpu_capability and no GPU on these hosts: the Blackwell defaults
    assert manifest["targets"] == ["10.0", "12.0"]
    assert manifest["target_source"] == "default"


def test_the_stack_imports_the_pinned_torch_and_holds_the_kernel(host):
    python = f"{_current(host)}/bin/python"
    versions = json.loads(host.check_output(
        f"{python} -c \"import json, importlib.metadata as m, torch; print(json.dumps("
        "[torch.__version__, torch.version.cuda, m.version('sglang-kernel')]))\""))
    assert versions == ["2.14.1+cu130", "13.0", "0.4.10"]

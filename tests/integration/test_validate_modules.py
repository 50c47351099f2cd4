"""ansible-core's own module checks (``ansible-test sanity --test validate-modules``) pass on every module
in library/: DOCUMENTATION against argument_spec, documentation format, imports. How it runs offline, what
is rewritten and what is skipped (and why): tests/validate_modules.py."""

import pytest
import validate_modules

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


def test_the_collection_holds_every_module_and_module_util(tmp_path):
    root = validate_modules.collection(tmp_path)
    assert sorted(p.stem for p in (root / "plugins" / "modules").glob("*.py")) == validate_modules.modules()
    assert validate_modules.modules(), "library/ holds no modules"
    ours = [p.stem for p in (validate_modules.REPO_ROOT / "module_utils").glob("*.py")]
    for path in (root / "plugins").rglob("*.py"):
        text = path.read_text()
        assert not [name for name in ours if f"ansible.module_utils.{name}" in text], path
    gpu_facts = (root / "plugins" / "modules" / "gpu_facts.py").read_text()
    assert "- module: sglang_fleet.local.torch_cuda_archs" in gpu_facts
    ignored = (root / "tests" / "sanity" / "ignore-2.19.txt").read_text().splitlines()
    assert {line.split()[1] for line in ignored} == {"validate-modules:missing-gplv3-license"}


def test_validate_modules(tmp_path):
    proc = validate_modules.run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'Running sanity test "validate-modules"' in proc.stdout + proc.stderr

"""``ansible-test sanity --test validate-modules`` on every module in library/, offline.

ansible-test checks only collections, so ``collection(dest)`` makes a temporary one from library/ and
module_utils/ (``sglang_fleet.local``: plugins/modules, plugins/module_utils). Two rewrites make the copy
importable and checkable, and each only reaches what cannot apply to a playbook repository's library/:
- ``ansible.module_utils.<ours>`` imports become ``ansible_collections.sglang_fleet.local.plugins.
  module_utils.<ours>``: inside a collection that is the only path ansible-test resolves for a module's
  own module_utils (a playbook's library/ gets ours under ansible.module_utils, as Ansible ships them).
- ``seealso`` module names become fully qualified (``gpu_facts`` -> ``sglang_fleet.local.gpu_facts``):
  validate-modules accepts only FQCNs there, while in a playbook repository the short name is the one
  that resolves. (Skipping this through the ignore file would skip every other documentation check of
  the module too: the error code is the general ``invalid-documentation``.)
Skipped through the collection's ``tests/sanity/ignore-X.Y.txt``, per module, and only this:
- ``missing-gplv3-license``: a GPLv3 header is the licence rule of modules contributed to Ansible's own
  collections; this project's modules are not, and carry the project's licence.

Offline: ansible-test puts pip into the sanity test's fresh venv with a get-pip.py downloaded from its CI
file server, which CI cannot reach. ``run()`` places tests/stand_ins/get-pip.py where ansible-test looks
for a cached download (``~/.ansible/test/cache/get_pip_<version>.py``): it installs the interpreter's
bundled pip (ensurepip) and, with it, the pinned pip and the test's pinned requirements from the package
index of the machine's pip configuration (PyPI), like every other install here. ansible-test keeps the
venv under ``~/.ansible/test/venv`` (its own cache), so only the first run installs anything.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
NAMESPACE, NAME = "sglang_fleet", "local"
FQ_MODULE_UTILS = f"ansible_collections.{NAMESPACE}.{NAME}.plugins.module_utils"
SKIPPED = {"missing-gplv3-license": "GPLv3 headers are the rule for Ansible's own collections only"}
ANSIBLE_TEST = str(Path(sys.executable).parent / "ansible-test")


def modules() -> list[str]:
    return sorted(p.stem for p in (REPO_ROOT / "library").glob("*.py"))


def collection(dest: Path) -> Path:
    """Write the temporary collection under ``dest``; return its root (the directory to test in)."""
    root = dest / "ansible_collections" / NAMESPACE / NAME
    ours = sorted(p.stem for p in (REPO_ROOT / "module_utils").glob("*.py"))
    imports = re.compile(r"\bansible\.module_utils\.(" + "|".join(map(re.escape, ours)) + r")\b")
    seealso = re.compile(r"^(\s*- module: )(" + "|".join(map(re.escape, modules())) + r")\s*$", re.M)
    for directory, source in (("plugins/modules", "library"), ("plugins/module_utils", "module_utils")):
        (root / directory).mkdir(parents=True)
        for path in sorted((REPO_ROOT / source).glob("*.py")):
            text = imports.sub(FQ_MODULE_UTILS + r".\1", path.read_text())
            text = seealso.sub(rf"\g<1>{NAMESPACE}.{NAME}.\g<2>", text)
            (root / directory / path.name).write_text(text)
    (root / "galaxy.yml").write_text(f"namespace: {NAMESPACE}\nname: {NAME}\nversion: 1.0.0\n"
                                     "readme: README.md\nauthors: [sglang-fleet maintainers]\n")
    (root / "README.md").write_text("Temporary collection made by tests/validate_modules.py.\n")
    (root / "meta").mkdir()
    (root / "meta" / "runtime.yml").write_text("requires_ansible: '>=2.19.0'\n")
    ignore = "".join(f"plugins/modules/{module}.py validate-modules:{code}  # {why}\n"
                     for module in modules() for code, why in SKIPPED.items())
    (root / "tests" / "sanity").mkdir(parents=True)
    for version in ("2.19",):
        (root / "tests" / "sanity" / f"ignore-{version}.txt").write_text(ignore)
    return root


def pip_bootstrap_version() -> str:
    """The pip version ansible-test bootstraps (its cached get-pip file is named after it)."""
    import ansible_test._internal.python_requirements as requirements  # noqa: PLC0415

    match = re.search(r"default_packages = dict\(\s*pip='([\d.]+)'", Path(requirements.__file__).read_text())
    if not match:
        raise RuntimeError("cannot find the pip version ansible-test bootstraps; "
                           "update tests/validate_modules.py")
    return match.group(1)


def run(dest: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run validate-modules on the collection made under ``dest`` (output in stdout/stderr)."""
    root = collection(dest)
    cached = Path.home() / ".ansible/test/cache" / f"get_pip_{pip_bootstrap_version().replace('.', '_')}.py"
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_ROOT / "tests" / "stand_ins" / "get-pip.py", cached)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return subprocess.run([ANSIBLE_TEST, "sanity", "--test", "validate-modules", "--python", python,
                           "--color", "no"], cwd=root, capture_output=True, text=True, timeout=timeout,
                          check=False)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        proc = run(Path(scratch))
        sys.stdout.write(proc.stdout + proc.stderr)
        sys.exit(proc.returncode)

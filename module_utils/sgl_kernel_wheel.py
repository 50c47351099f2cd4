"""Pre-install scan of an sgl_kernel wheel: will it run on the fleet's GPUs with the stack's torch?

Two facts decide (shared upstream facts):
- For every target capability, the ``common_ops`` file that the upstream loader picks (``sm90/`` for 9.0,
  ``sm100/`` for anything else, then the package-root file) must hold code that runs there. The file
  is read from the wheel itself, before anything is installed.
- The ``.so`` files are ABI-tied to the exact torch they were built against, so the wheel's
  ``Requires-Dist: torch==X`` must name the stack's torch. A wheel that names no exact torch is refused:
  nothing then says which torch it was built for.

``decide_install`` turns the scan and the ``sgl_kernel_install`` mode into "wheel", "source" or a failure.
Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import os
import re
import shutil
import tempfile
import zipfile
import zlib

from ansible.module_utils.cuda_arch import describe_archs, describe_targets, runs_on
from ansible.module_utils.cuda_fatbin import FatbinError, scan_file
from ansible.module_utils.sgl_kernel_layout import (
    PACKAGE,
    ROOT_VARIANT,
    filter_compiled_extensions,
    loader_choice,
    loader_subdir,
)

INSTALL_MODES = ("auto", "wheel", "source")
# "torch" as the whole project name: torchvision, torch-tensorrt or torch_c_dlpack_ext are other projects
_REQUIRES_TORCH = re.compile(r"^torch(?![\w.-])\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*(?:;(?P<marker>.*))?$",
                             re.I)
_EXACT = re.compile(r"^===?\s*(?P<version>[0-9][^,\s]*)$")


class WheelError(Exception):
    """The wheel cannot be read; the message names it and says what to do."""


def wheel_metadata(archive, name):
    """(Name, Version, [Requires-Dist lines]) from the wheel's ``*.dist-info/METADATA``."""
    metadata = [m for m in archive.namelist() if m.count("/") == 1 and m.endswith(".dist-info/METADATA")]
    if len(metadata) != 1:
        raise WheelError(f"{name} has {len(metadata)} .dist-info/METADATA files (expected 1); it is not a "
                         "wheel, or a broken one: download it again")
    text = archive.read(metadata[0]).decode("utf-8", "replace")
    headers = text.split("\n\n", 1)[0]
    fields = {"Name": None, "Version": None}
    requires = []
    for line in headers.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        if key == "Requires-Dist":
            requires.append(value.strip())
        elif key in fields:
            fields[key] = value.strip()
    return fields["Name"], fields["Version"], requires


def torch_pin(requires):
    """The exact torch version a wheel requires ("2.14.1"), or None; plus the requirement text found."""
    for requirement in requires:
        match = _REQUIRES_TORCH.match(requirement)
        if not match:
            continue
        marker = (match.group("marker") or "").strip()
        if "extra" in marker:
            continue  # an optional extra does not say what the .so files were built against
        exact = _EXACT.match(match.group("spec").strip().strip("()").strip())
        return (exact.group("version") if exact else None), requirement
    return None, None


def public_version(version):
    """"2.14.1" for "2.14.1+cu130": the local label names the CUDA build, the ABI is the release's."""
    return str(version).split("+", 1)[0].strip()


def torch_matches(pin, stack_torch):
    """The pin (``==2.14.1`` or ``==2.14.1+cu130``) admits the stack's torch (PEP 440 ``==``)."""
    if pin is None or not stack_torch:
        return False
    if "+" in pin:
        return pin == str(stack_torch)
    return public_version(pin) == public_version(stack_torch)


def _variant_members(names):
    """{variant: [members in loader order]} for ``sgl_kernel/<variant>/common_ops.*`` and the root."""
    found = {}
    for name in names:
        parts = name.split("/")
        if parts[0] != PACKAGE or not parts[-1].startswith("common_ops."):
            continue
        if len(parts) == 2:
            found.setdefault(ROOT_VARIANT, []).append(name)
        elif len(parts) == 3 and not parts[1].startswith("__"):
            found.setdefault(parts[1], []).append(name)
    return {variant: filter_compiled_extensions(members) for variant, members in sorted(found.items())}


def _scan_member(archive, member, wheel_name, workdir):
    if not any(member.endswith(e) or e in member for e in (".so", ".pyd", ".dll")):
        return [], []
    target = os.path.join(workdir, member.replace("/", "_"))
    with archive.open(member) as source, open(target, "wb") as sink:
        shutil.copyfileobj(source, sink, 1 << 20)
    try:
        code = scan_file(target)
    except FatbinError as exc:
        raise WheelError(f"{member} in {wheel_name} is not a readable shared object ({exc}); download the "
                         "wheel again") from None
    finally:
        os.unlink(target)
    return list(code.sass), list(code.ptx)


def scan_wheel(path, capabilities, stack_torch, workdir=None):
    """Scan the wheel at ``path`` for ``capabilities`` (canonical strings) and ``stack_torch``.

    Returns a dict: name, version, torch_pin, torch_requirement, torch_ok, variants {variant: {member,
    sass, ptx}}, capabilities {cap: {variant, member, runs_on}}, problems [messages], fits (bool).
    """
    wheel_name = os.path.basename(path)
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelError(f"cannot open wheel {path}: {exc}; download it again") from None
    scratch = tempfile.mkdtemp(prefix="sgl-kernel-scan-", dir=workdir)
    try:
        with archive:
            name, version, requires = wheel_metadata(archive, wheel_name)
            members = _variant_members(archive.namelist())
            variants = {}
            for variant, files in members.items():
                sass, ptx = _scan_member(archive, files[0], wheel_name, scratch)
                variants[variant] = {"member": files[0], "sass": sass, "ptx": ptx}
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:  # a member's data is damaged
        raise WheelError(f"cannot read wheel {path}: {str(exc) or type(exc).__name__}; it is corrupt: "
                         "download it again") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    pin, requirement = torch_pin(requires)
    result = {"wheel": wheel_name, "name": name, "version": version, "torch_pin": pin,
              "torch_requirement": requirement, "torch_ok": torch_matches(pin, stack_torch),
              "variants": variants, "capabilities": {}, "problems": []}
    for capability in capabilities:
        selected, _how = loader_choice(variants, capability)
        entry = {"variant": selected, "member": variants[selected]["member"] if selected else None,
                 "runs_on": runs_on(variants[selected]["sass"], variants[selected]["ptx"], capability)
                 if selected else False}
        result["capabilities"][capability] = entry
        if selected is None:
            result["problems"].append(
                f"{wheel_name}: capability {capability}: the wheel has no {loader_subdir(capability)}/"
                f"common_ops.* and no package-root common_ops.*, so the loader finds nothing to load")
        elif not entry["runs_on"]:
            found = variants[selected]
            result["problems"].append(
                f"{wheel_name}: capability {capability}: the loader picks {found['member']}, which has "
                f"{describe_archs(found['sass'], found['ptx'])}, none of which runs on {capability} "
                f"(needs {describe_targets(capability)})")
    if not result["torch_ok"]:
        if pin is None:
            result["problems"].append(
                f"{wheel_name}: requires {requirement or 'no torch at all'}, not an exact torch==X pin, so "
                f"nothing says which torch its .so files were built against (the stack has torch "
                f"{stack_torch})")
        else:
            result["problems"].append(
                f"{wheel_name}: built for torch=={pin} (Requires-Dist: {requirement}) but the stack has "
                f"torch {stack_torch}; its .so files are ABI-tied to the exact torch and would fail to "
                "import with 'undefined symbol'")
    result["fits"] = not result["problems"]
    return result


def decide_install(mode, scan):
    """("wheel" | "source", reason) for ``sgl_kernel_install`` ``mode`` and a scan_wheel result or None.

    Raises WheelError for mode "wheel" when the wheel does not fit (the message lists every problem).
    """
    if mode not in INSTALL_MODES:
        raise WheelError(f"sgl_kernel_install is {mode!r}; use one of {', '.join(INSTALL_MODES)}")
    if mode == "source":
        return "source", "sgl_kernel_install is source"
    if scan is None:
        if mode == "wheel":
            raise WheelError("sgl_kernel_install is wheel but no wheel was found to scan; check the index or "
                             "wheelhouse, or set sgl_kernel_install=auto or source")
        return "source", "no released wheel was found, so it is built from source"
    if scan["fits"]:
        covered = ", ".join(f"{cap} ({entry['variant']}/)" for cap, entry in scan["capabilities"].items())
        return "wheel", f"{scan['wheel']} fits: torch=={scan['torch_pin']}, runs on {covered or 'no target'}"
    problems = "; ".join(scan["problems"])
    if mode == "wheel":
        raise WheelError(f"refusing to install: {problems}. Set sgl_kernel_install=auto or source to build "
                         "it for these targets and this torch")
    return "source", f"the wheel does not fit, so it is built from source: {problems}"

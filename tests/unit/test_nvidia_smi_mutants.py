"""module_utils/nvidia_smi.py: the kernel-module version file in its variants, the time bound of every
nvidia-smi call, and the kernel-module check when one side of it is unknown.

nvidia-smi here is a STAND-IN written by each test (a small shell script), run as a real process.
"""

from __future__ import annotations

import locale

import pytest
from ansible.module_utils import bounded_run, nvidia_smi
from ansible.module_utils.bounded_run import RunTimeout
from ansible.module_utils.nvidia_smi import gpu_facts, read_kernel_module_version
from locales import c_locale

FIELDS = "index,name,uuid,compute_cap,memory.total,pci.bus_id,driver_version"
ROW = "0, NVIDIA H200, GPU-1, 9.0, 143771, 00000000:18:00.0, 580.95.05"
BANNER = "| NVIDIA-SMI 580.95.05    Driver Version: 580.95.05    CUDA Version: 13.0 |"


def smi(tmp_path, script: str, name: str = "nvidia-smi") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def version_of(tmp_path, content: bytes):
    path = tmp_path / "version"
    path.write_bytes(content)
    return read_kernel_module_version([str(path)])


# /proc/driver/nvidia/version: the version is the first one after the first "Kernel Module".

def test_a_version_like_number_before_kernel_module_is_not_the_version(tmp_path):
    text = b"NVRM version: NVIDIA UNIX x86_64 build 999.99 Kernel Module  570.172.08  Tue Jul  8 2025\n"
    assert version_of(tmp_path, text)[0] == "570.172.08"


def test_the_first_kernel_module_version_is_taken(tmp_path):
    text = (b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Release Build\n"
            b"NVRM note: Kernel Module 123.45 Kernel Module 456.78\n")
    assert version_of(tmp_path, text)[0] == "570.172.08"


def test_an_nvrm_text_without_kernel_module_is_searched_whole(tmp_path):
    assert version_of(tmp_path, b"NVRM version: NVIDIA UNIX x86_64  580.95.05  Release Build\n")[0] == (
        "580.95.05")


def test_a_sys_file_is_read_as_it_is(tmp_path):
    # "Kernel Module" is looked for only in the /proc format (it starts with NVRM)
    assert version_of(tmp_path, b"580.95.05 Kernel Module 123.45\n")[0] == "580.95.05"


def test_bytes_that_are_not_utf8_are_replaced_not_an_error(tmp_path):
    text = (b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Release Build  (b\xe9@h\xf4st)\n"
            b"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \xff\n")
    assert version_of(tmp_path, text) == ("570.172.08", str(tmp_path / "version"))


@pytest.mark.parametrize("content", [
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05ü  Release Build\n",
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  é580.95.05  570.172.08\n",
], ids=["letter-after", "letter-before"])
def test_the_answer_does_not_depend_on_the_locale(tmp_path, content):
    # Ansible runs the module with the host's locale: the file is UTF-8 (kernel text), whatever that is.
    path = tmp_path / "version"
    path.write_text(content, encoding="utf-8")
    with c_locale():
        assert locale.getpreferredencoding(False) != "UTF-8"
        under_c = read_kernel_module_version([str(path)])
    assert under_c == read_kernel_module_version([str(path)])


# Every nvidia-smi call is bounded by the same timeout.

@pytest.fixture
def short_grace(monkeypatch):
    monkeypatch.setattr(bounded_run, "KILL_GRACE", 0.3)


def test_a_hung_legacy_retry_is_bounded(tmp_path, short_grace):
    legacy = smi(tmp_path, f'case "$1" in\n  --query-gpu={FIELDS}) '
                           "echo 'Field \"compute_cap\" is not a valid field to query.'; exit 2;;\n"
                           "  --query-gpu=*) sleep 2; echo '0, NVIDIA A100, GPU-1, 81920, 00000000:07:00.0, "
                           "470.256.02';;\nesac\n")
    facts = gpu_facts(legacy, timeout=0.3, module_version_files=[])
    assert facts["present"] is False
    assert facts["reason"] == (f"{legacy} did not answer within 0.3 s (a hung GPU or driver? check dmesg "
                               "for Xid errors)")


def test_a_hung_banner_is_bounded_and_leaves_the_query_facts(tmp_path, short_grace):
    path = smi(tmp_path, f'case "$1" in\n  --query-gpu=*) echo "{ROW}";;\n  *) sleep 2; echo "{BANNER}";;\n'
                         "esac\n")
    facts = gpu_facts(path, timeout=0.3, module_version_files=[])
    assert facts["present"] is True
    assert facts["driver_version"] == "580.95.05"
    assert (facts["user_space_driver_version"], facts["cuda_driver_version"]) == (None, None)


def test_the_default_timeout_is_30_seconds(tmp_path, monkeypatch):
    # STAND-IN for a hung nvidia-smi: run_bounded answers at once as if the timeout had passed.
    def hung(argv, timeout, **kwargs):
        raise RunTimeout(argv, timeout, b"", b"", None)

    monkeypatch.setattr(nvidia_smi, "run_bounded", hung)
    path = smi(tmp_path, "exit 0")
    assert gpu_facts(path, module_version_files=[])["reason"] == (
        f"{path} did not answer within 30 s (a hung GPU or driver? check dmesg for Xid errors)")


# The kernel-module check needs both versions; with one unknown it is not made.

def test_no_loaded_module_version_is_no_mismatch(tmp_path):
    path = smi(tmp_path, f'case "$1" in\n  --query-gpu=*) echo "{ROW}";;\n  *) echo "{BANNER}";;\nesac\n')
    facts = gpu_facts(path, module_version_files=[str(tmp_path / "absent")])
    assert facts["present"] is True
    assert facts["user_space_driver_version"] == "580.95.05"
    assert facts["kernel_module_version"] is None
    assert (facts["kernel_module_mismatch"], facts["reload_required"], facts["reload_reason"]) == (
        None, False, None)


def test_no_user_space_version_is_no_mismatch(tmp_path):
    row = ROW.replace("580.95.05", "[N/A]")
    path = smi(tmp_path, f'case "$1" in\n  --query-gpu=*) echo "{row}";;\n  *) exit 9;;\nesac\n')
    module = tmp_path / "version"
    module.write_text("575.57.08\n")
    facts = gpu_facts(path, module_version_files=[str(module)])
    assert facts["present"] is True
    assert facts["driver_version"] is None
    assert facts["kernel_module_version"] == "575.57.08"
    assert (facts["kernel_module_mismatch"], facts["reload_required"], facts["reload_reason"]) == (
        None, False, None)

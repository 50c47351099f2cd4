"""tests/gpu_host_report.py's agreement checks: only a real comparison may say True or False."""

from gpu_host_report import agreement

H200 = {"name": "NVIDIA H200", "capability": "9.0"}
TORCH_LIST = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def report(gpus=(), torch_devices=(), arch_list=TORCH_LIST, torch_arch_list=TORCH_LIST, loaded_expected=None):
    result = {"gpu_facts": {"gpus": list(gpus)},
              "torch_own": {"devices": list(torch_devices), "torch.cuda.get_arch_list()": torch_arch_list},
              "torch_cuda_archs": {"arch_list": arch_list}}
    if loaded_expected is not None:
        result["sgl_kernel_variants"] = {"import_check": {"loaded_expected": loaded_expected}}
    return result


def test_devices():
    assert agreement(report([H200], [H200]))["gpu_facts_devices_equal_torch_devices"] is True
    # nvidia-smi sees a GPU that torch does not (CUDA_VISIBLE_DEVICES, a CPU build, a broken driver)
    assert agreement(report([H200], []))["gpu_facts_devices_equal_torch_devices"] is False
    assert agreement(report([], [H200]))["gpu_facts_devices_equal_torch_devices"] is False
    assert agreement(report())["gpu_facts_devices_equal_torch_devices"] is None


def test_arch_list_against_torchs_public_api():
    assert agreement(report())["torch_cuda_archs_arch_list_equals_torch"] is True
    assert agreement(report(arch_list=["sm_90"]))["torch_cuda_archs_arch_list_equals_torch"] is False
    # torch <= 2.12 without a GPU: get_arch_list() is [], nothing independent to compare with
    assert agreement(report(torch_arch_list=[]))["torch_cuda_archs_arch_list_equals_torch"] is None


def test_sgl_kernel_import():
    assert agreement(report(loaded_expected=True))["sgl_kernel_loaded_the_expected_file"] is True
    assert agreement(report())["sgl_kernel_loaded_the_expected_file"] is None

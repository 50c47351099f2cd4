"""tests/documented.py itself: it must catch an undocumented key at any depth it checks."""

from documented import COMMON, documented_returns, undocumented

SPEC = {"files": {"type": "list", "contains": {"path": {}, "sass": {}}},
        "counts": {"type": "dict", "contains": {"files": {}}},
        "missing": {"type": "dict"}}


def test_nested_keys_are_checked_against_contains():
    result = {"changed": False, "files": [{"path": "a", "sass": []}, {"path": "b", "extra": 1}],
              "counts": {"files": 2, "surprise": 0}, "missing": {"12.0": []}, "other": 1}
    assert undocumented(result, SPEC, common=COMMON) == ["other", "files[1].extra", "counts.surprise"]


def test_every_module_documents_its_nested_returns():
    # The contains blocks the checks rely on are there.
    assert set(documented_returns("cuda_binary_archs")["counts"]["contains"]) == {
        "files", "with_device_code", "without_device_code"}
    assert "loaded_expected" in documented_returns("sgl_kernel_variants")["import_check"]["contains"]
    assert "covered" in documented_returns("torch_cuda_archs")["devices"]["contains"]
    assert "capability" in documented_returns("gpu_facts")["gpus"]["contains"]
    assert "min_version" in documented_returns("cuda_toolkit")["requirements"]["contains"]

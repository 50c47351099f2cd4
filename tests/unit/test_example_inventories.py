"""The shipped example inventories: every served-model entry renders for the capability of its group
(the real parser run is tests/integration/test_sglang_cmdline_parser.py), and the Kimi-K2.5 example
keeps the SM120 choices its comments cite from sglang 0.5.23."""

from __future__ import annotations

import re

import pytest
import yaml
from ansible.module_utils.sglang_cmdline import ConfigError, render
from example_inventories import INVENTORIES, model_entries

# Backends whose kernels sglang 0.5.23 has only for other GPUs (see the example's comments): FA3 (Hopper),
# FlashMLA's CUDA kernel (not on SM120), the trtllm-gen MLA/MHA kernels and MoE runner (SM100).
NOT_ON_SM120 = {"fa3", "flashmla", "trtllm_mla", "cutlass_mla"}


def test_every_example_entry_renders_for_its_groups_capability():
    entries = model_entries()
    assert entries
    for entry in entries:
        server = render(entry.model, [entry.capability], prefix=entry.where, staged=entry.staged)
        assert server["serves_http"], entry.where


def test_kimi_on_sm120_uses_triton_mla_eagle3_and_the_pcie_workaround():
    (kimi,) = [e for e in model_entries() if e.inventory == "kimi-k2.5" and e.capability == "12.0"]
    model = kimi.model
    assert model["tp_size"] == 8
    assert model["attention_backend"] == "triton"
    assert model["attention_backend"] not in NOT_ON_SM120
    assert model.get("moe_runner_backend") in (None, "auto")  # never flashinfer_trtllm on 12.0
    assert model["speculative"]["algorithm"] == "EAGLE3"
    server = render(model, ["12.0"], staged=kimi.staged)
    assert "--disable-custom-all-reduce" in server["args"]
    assert server["env"]["NCCL_P2P_DISABLE"] == "1"
    assert not NOT_ON_SM120 & set(server["args"])


def test_kimi_on_b200_uses_the_sm100_kernels_without_the_pcie_workaround():
    (kimi,) = [e for e in model_entries() if e.inventory == "kimi-k2.5" and e.capability == "10.0"]
    server = render(kimi.model, ["10.0"], staged=kimi.staged)
    assert server["args"][server["args"].index("--attention-backend") + 1] == "trtllm_mla"
    assert "--disable-custom-all-reduce" not in server["args"]
    assert "NCCL_P2P_DISABLE" not in server["env"]


def test_the_kimi_example_stages_its_weights_at_a_pinned_commit_and_serves_offline():
    for kimi in [e for e in model_entries() if e.inventory == "kimi-k2.5"]:
        # the ~600 GB are the model_weights stage's, at a commit (a branch moves): never a Hub download
        # at the unit's first start
        assert re.fullmatch(r"[0-9a-f]{40}", kimi.model["weights"]["revision"]), kimi.where
        assert kimi.model["draft_weights"], kimi.where
        assert "model_path" not in kimi.model
        assert "draft_model_path" not in kimi.model["speculative"]
        server = render(kimi.model, [kimi.capability], staged=kimi.staged)
        args = server["args"]
        staged = kimi.staged["kimi"]
        assert args[args.index("--model-path") + 1] == staged["model_path"]
        assert staged["model_path"].endswith("/moonshotai/Kimi-K2.5/" + kimi.model["weights"]["revision"])
        assert args[args.index("--speculative-draft-model-path") + 1] == staged["draft_model_path"]
        assert args[args.index("--served-model-name") + 1] == "kimi-k2.5"
        assert server["env"]["HF_HUB_OFFLINE"] == "1"
        # without the stage having run, the unit is refused rather than left to download
        with pytest.raises(ConfigError, match="not staged on this host"):
            render(kimi.model, [kimi.capability])


def test_the_kimi_example_has_the_hosts_its_jobs_need():
    hosts = yaml.safe_load((INVENTORIES / "kimi-k2.5" / "hosts.yml").read_text())["all"]["children"]
    assert list(hosts["sglang_replicas"]["children"]["rtx_pro_6000"]["hosts"]) == ["kimi-01"]
    assert list(hosts["kimi_b200"]["hosts"]) == ["kimi-b200-01"]
    assert list(hosts["sglang_gateway"]["hosts"]) == ["kimi-gw-01"]
    assert list(hosts["builders"]["hosts"]) == ["kimi-build-01"]
    common = yaml.safe_load((INVENTORIES / "kimi-k2.5" / "group_vars" / "all.yml").read_text())
    assert common["sglang_service_gateway_model"] == "kimi"


def test_the_generic_example_has_the_groups_site_and_rolling_rebuild_target():
    hosts = yaml.safe_load((INVENTORIES / "example" / "hosts.yml").read_text())["all"]["children"]
    assert list(hosts["sglang_replicas"]["children"]) == ["blackwell"]
    assert list(hosts["sglang_gateway"]["hosts"]) == ["gw-01"]
    assert list(hosts["builders"]["hosts"]) == ["build-01"]
    served: dict[str, list[str]] = {}
    for entry in model_entries():
        if entry.inventory == "example":
            served.setdefault(entry.group, []).append(entry.model["name"])
    assert served == {"b200": ["chat"], "blackwell": ["chat"], "hopper": ["embed"]}
    common = yaml.safe_load((INVENTORIES / "example" / "group_vars" / "all.yml").read_text())
    assert common["sglang_service_gateway_model"] in served["blackwell"]

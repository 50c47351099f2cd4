"""Every command line the role renders (tests/unit/cases/sglang_cmdline.yml, EAGLE-3 and multi-node
included, and every served-model entry of the shipped example inventories) parses with the REAL sglang
0.5.23 parser (``prepare_server_args``, what launch_server runs
first); the entries the role rejects never get that far; and the parser does reject what 0.5.23 does
not know, so a pass means something."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.sglang_cmdline import ConfigError, render
from example_inventories import model_entries
from sglang_parser import parser_python

pytestmark = pytest.mark.integration

CASE_FILE = Path(__file__).resolve().parents[1] / "unit" / "cases" / "sglang_cmdline.yml"
CASES = yaml.safe_load(CASE_FILE.read_text())

PARSE_ALL = r"""
import contextlib, io, json, sys, warnings
warnings.simplefilter("ignore")
from sglang.srt.server_args import prepare_server_args
out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            a = prepare_server_args(argv)
        out.append({"ok": True, "tp_size": a.tp_size, "nnodes": a.nnodes, "node_rank": a.node_rank,
                    "host": a.host, "port": a.port, "speculative_algorithm": a.speculative_algorithm,
                    "dist_init_addr": a.dist_init_addr, "attention_backend": a.attention_backend,
                    "draft": a.speculative_draft_model_path, "num_steps": a.speculative_num_steps,
                    "topk": a.speculative_eagle_topk, "draft_tokens": a.speculative_num_draft_tokens})
    except SystemExit as exc:
        out.append({"ok": False, "code": exc.code, "error": err.getvalue().strip().splitlines()[-1:]})
print(json.dumps(out))
"""


def _parse(argvs):
    proc = subprocess.run([str(parser_python()), "-c", PARSE_ALL], input=json.dumps(argvs), text=True,
                          capture_output=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _render(case):
    return render(case["model"], case.get("capabilities", ()), case.get("group_hosts", ()),
                  hostname=case.get("hostname", ""), rank0_address=case.get("rank0_address", ""),
                  staged=case.get("staged"), require_staged=case.get("require_staged", True))


def test_rendered_command_lines_parse_with_the_real_parser():
    rendered = [_render(case) for case in CASES["valid"]]
    results = _parse([r["args"] for r in rendered])
    for case, server, parsed in zip(CASES["valid"], rendered, results):
        assert parsed["ok"], (case["name"], server["args"], parsed)
        assert parsed["tp_size"] == (case["model"].get("tp_size") or 1), case["name"]
        assert parsed["node_rank"] == server["rank"], case["name"]
        assert parsed["nnodes"] == server["nnodes"], case["name"]
        assert parsed["host"] == case["model"].get("host", "127.0.0.1")
        if case["model"].get("speculative"):
            assert parsed["speculative_algorithm"] == "EAGLE3"


def test_the_real_parser_rejects_what_0_5_23_does_not_know():
    base = ["--model-path", "/m"]
    results = _parse([[*base, "--cuda-graph-max-bs", "8"], [*base, "--no-such-flag"],
                      [*base, "--attention-backend", "fa9"]])
    assert [r["ok"] for r in results] == [False, False, False]
    assert "ambiguous option: --cuda-graph-max-bs" in results[0]["error"][0]
    assert "unrecognized arguments: --no-such-flag" in results[1]["error"][0]


def test_invalid_entries_are_rejected_before_rendering():
    for case in CASES["invalid"]:
        with pytest.raises(ConfigError):
            _render(case)


def test_the_example_inventories_command_lines_parse_with_the_real_parser():
    entries = model_entries()
    assert {(e.inventory, e.capability) for e in entries} >= {("kimi-k2.5", "12.0"), ("kimi-k2.5", "10.0")}
    rendered = [render(e.model, [e.capability], prefix=e.where, staged=e.staged) for e in entries]
    results = _parse([r["args"] for r in rendered])
    for entry, parsed in zip(entries, results):
        assert parsed["ok"], (entry.where, parsed)
        assert parsed["tp_size"] == entry.model.get("tp_size", 1), entry.where
        assert parsed["attention_backend"] == entry.model.get("attention_backend"), entry.where
        spec = entry.model.get("speculative")
        if spec:
            parsed_spec = (parsed["speculative_algorithm"], parsed["draft"], parsed["num_steps"],
                           parsed["topk"], parsed["draft_tokens"])
            staged = entry.staged.get(entry.model["name"], {})
            draft = staged.get("draft_model_path") or spec["draft_model_path"]
            assert parsed_spec == (spec["algorithm"], draft, spec["num_steps"],
                                   spec["eagle_topk"], spec["num_draft_tokens"]), entry.where
    kimi = {e.capability: p for e, p in zip(entries, results) if e.inventory == "kimi-k2.5"}
    assert kimi["12.0"]["attention_backend"] == "triton"
    assert kimi["10.0"]["attention_backend"] == "trtllm_mla"
    assert kimi["12.0"]["speculative_algorithm"] == "EAGLE3"


def test_0_5_23_knows_the_mla_backends_the_example_names_and_not_cutlass_mla():
    # the example's SM120 comment: cutlass_mla is not an attention backend of 0.5.23 any more
    base = ["--model-path", "/m", "--attention-backend"]
    results = _parse([[*base, "cutlass_mla"], [*base, "triton"], [*base, "trtllm_mla"], [*base, "flashmla"]])
    assert [r["ok"] for r in results] == [False, True, True, True]
    assert "argument --attention-backend: invalid choice: 'cutlass_mla'" in results[0]["error"][0]

"""module_utils/sglang_cmdline: cases from cases/sglang_cmdline.yml, plus ExecStart quoting."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.sglang_cmdline import ConfigError, render, systemd_quote

CASES = yaml.safe_load((Path(__file__).parent / "cases" / "sglang_cmdline.yml").read_text())


def _render(case):
    # require_staged only where the case says (render's default, true, is what the other cases see)
    extra = {"require_staged": case["require_staged"]} if "require_staged" in case else {}
    return render(case["model"], case.get("capabilities", ()), case.get("group_hosts", ()),
                  hostname=case.get("hostname", ""), rank0_address=case.get("rank0_address", ""),
                  staged=case.get("staged"), **extra)


def _contains_in_order(args, fragment):
    n = len(fragment)
    return any(args[i:i + n] == fragment for i in range(len(args) - n + 1))


@pytest.mark.parametrize("case", CASES["valid"], ids=[c["name"] for c in CASES["valid"]])
def test_valid(case):
    server = _render(case)
    if "args" in case:
        assert server["args"] == case["args"]
    if case.get("contains"):
        assert _contains_in_order(server["args"], case["contains"]), server["args"]
    for word in case.get("absent", []):
        assert word not in server["args"]
    assert server["env"] == case["env"]
    assert server["rank"] == case.get("rank", 0)
    assert server["serves_http"] is (server["rank"] == 0)
    # the loopback default holds unless the entry says otherwise
    assert server["args"][server["args"].index("--host") + 1] == case["model"].get("host", "127.0.0.1")


@pytest.mark.parametrize("case", CASES["invalid"], ids=[c["name"] for c in CASES["invalid"]])
def test_invalid_names_the_variable(case):
    with pytest.raises(ConfigError) as exc:
        _render(case)
    message = str(exc.value)
    assert message.startswith(case["error"][0]), message
    for fragment in case["error"]:
        assert fragment in message, (fragment, message)


def test_ranks_of_a_group_are_consistent():
    hosts = ["n1", "n2", "n3", "n4"]
    model = {"name": "m", "model_path": "/m", "tp_size": 8, "nodes_group": "g"}
    rendered = [render(model, (), hosts, hostname=h, rank0_address="10.1.1.1") for h in hosts]
    assert [r["rank"] for r in rendered] == [0, 1, 2, 3]
    assert {r["nnodes"] for r in rendered} == {4}
    inits = {r["args"][r["args"].index("--dist-init-addr") + 1] for r in rendered}
    assert inits == {"10.1.1.1:50000"}
    assert [r["serves_http"] for r in rendered] == [True, False, False, False]


@pytest.mark.parametrize("argv", [
    ["/opt/sglang/stacks/current/bin/python", "-m", "sglang.launch_server", "--model-path", "/m"],
    ["p", "--chat-template", "{% for m in messages %}{{ m }}{% endfor %}"],
    ["p", "--json-model-override-args", '{"rope_scaling": {"type": "yarn"}}'],
    ["p", "a b", "$HOME", "100%", "back\\slash"],
])
def test_systemd_quote_round_trips(argv):
    # systemd unquotes like a shell for "..." words, and unescapes $$ -> $ and %% -> % itself
    line = systemd_quote(argv)
    assert shlex.split(line.replace("$$", "\0").replace("%%", "%").replace("\0", "$")) == argv
    assert "$" not in line.replace("$$", "")


def test_systemd_quote_never_lets_a_line_break_into_the_unit_line():
    # "$" in a regex matches before a trailing newline: "x\n" once passed as a safe word and cut ExecStart=
    assert systemd_quote(["x\n", "a\r\nb"]) == '"x\\n" "a\\r\\nb"'
    assert "\n" not in systemd_quote(["--chat-template", "line one\nline two"])

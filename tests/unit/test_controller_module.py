"""action_plugins/controller_module.py: the modules the roles run on the controller (inventory_check,
sglang_models_check, rollout_units, stack_pylock, sglang_server_args) run inside the controller's worker,
with the module's own argument spec and result, and as a module process anywhere else.

Each case runs once through the project's configuration (the plugin) and once with ANSIBLE_ACTION_PLUGINS
pointing at an empty directory (the module alone, as Ansible runs any module): the results must be the
same, and only the second may build and run the module's AnsiballZ payload (-vvv names it)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from ansible_run import REPO_ROOT, run_playbook

PLUGINS = REPO_ROOT / "action_plugins"
IN_PROCESS = ("inventory_check", "sglang_models_check", "rollout_units", "stack_pylock", "sglang_server_args")

SPECS = {"demo": {"argument_specs": {"main": {"options": {"demo_port": {"type": "int"}}}}}}
CASES = {
    # a problem: a misspelled variable, a wrong type
    "inventory problem": ("inventory_check", {
        "host": "h1", "variables": {"demo_port": "80"}, "names": ["demo_port", "demo_prot"],
        "specs": SPECS}),
    "inventory clean": ("inventory_check", {"host": "h1", "variables": {"demo_port": 80}, "specs": SPECS}),
    "a secret not shown": ("inventory_check", {
        "host": "h1", "variables": {}, "specs": {"demo": {"argument_specs": {"main": {"options": {
            "demo_token": {"type": "str", "no_log": True}}}}}}, "secrets": {"demo_token": "12345"}}),
    "models problem": ("sglang_models_check", {"host": "h1", "models": [{"name": "m"}]}),
    "units": ("rollout_units", {"hosts": ["a", "b", "c"], "groups": {"all": ["a", "b", "c"]}, "serial": 2}),
    "units impossible": ("rollout_units", {"hosts": ["a"], "groups": {}, "serial": 0}),
    "lock": ("stack_pylock", {"profile_path": str(REPO_ROOT / "profiles" / "stable.yml"),
                              "machine": "x86_64", "python_version": "3.11", "glibc": "2.36"}),
    "no profile": ("stack_pylock", {"profile_path": "/nonexistent/profile.yml"}),
    "bad arguments": ("rollout_units", {"groups": {}, "colour": "red"}),
    "command line": ("sglang_server_args", {"model": {"name": "m", "model_path": "/m", "port": 30001}}),
    "invalid entry": ("sglang_server_args", {"model": {"name": "m"}, "variable": "sglang_service_models[3]"}),
}
# Where the plugin must leave the module to Ansible: become (su from root to root needs no password) and
# async. Both ways run the module process then.
AS_MODULE = {
    "units with become": ({"become": True, "become_method": "ansible.builtin.su"}, CASES["units"]),
    "units async": ({"async": 60, "poll": 1}, CASES["units"]),
}


def play() -> list[dict]:
    cases = {name: ({}, case) for name, case in CASES.items()} | AS_MODULE
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": name, module: args, "delegate_to": "localhost", "ignore_errors": True, **keywords}
        for name, (keywords, (module, args)) in cases.items()]}]


# AnsibleModule adds the attributes of the file a result's `path` names (stack_pylock's lock); the plugin
# does not, and no role reads them.
PATH_INFO = {"uid", "gid", "owner", "group", "mode", "size", "state"}


def comparable(result: dict) -> dict:
    """A task's result less what the way in adds or numbers: the module's invocation echo, a path's
    attributes, an async job's id and file, and Ansible's own keys."""
    added = ({"invocation", "warnings", "deprecations", "ansible_job_id", "results_file"}
             | (PATH_INFO if "path" in result else set()))
    return {k: v for k, v in result.items() if k not in added and not k.startswith("_ansible")}


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory):
    no_plugins = tmp_path_factory.mktemp("no-action-plugins")
    plugin = run_playbook(play(), cmdline="-vvv")
    module = run_playbook(play(), cmdline="-vvv", envvars={"ANSIBLE_ACTION_PLUGINS": str(no_plugins)})
    return plugin, module


@pytest.mark.parametrize("case", [*CASES, *AS_MODULE])
def test_the_plugin_gives_the_modules_result(both_ways, case):
    plugin, module = both_ways
    got, expected = plugin.task("localhost", case), module.task("localhost", case)
    assert comparable(got) == comparable(expected), json.dumps(
        {"plugin": comparable(got), "module": comparable(expected)}, indent=1, default=str)[:4000]


def test_the_cases_cover_success_failure_and_bad_arguments(both_ways):
    plugin, _ = both_ways
    failed = {case for case in CASES if plugin.task("localhost", case)["event"] == "runner_on_failed"}
    assert failed == {"inventory problem", "models problem", "units impossible", "no profile",
                      "bad arguments", "invalid entry"}
    assert "sglang_service_models[3]" in plugin.task("localhost", "invalid entry")["msg"]
    assert "--model-path /m" in plugin.task("localhost", "command line")["exec_start"]
    assert plugin.task("localhost", "bad arguments")["msg"] == "missing required arguments: hosts"
    assert plugin.task("localhost", "lock")["packages"] > 100, "the committed lock, read for real"
    assert "12345" not in plugin.stdout + json.dumps(plugin.task("localhost", "a secret not shown"))


def module_processes(result, task: str) -> int:
    """How many module payloads the -vvv output shows running between ``task``'s start and the next."""
    text = result.stdout.split(f"TASK [{task}]", 1)[1].split("TASK [", 1)[0]
    return text.count("AnsiballZ_")


def test_only_the_module_way_runs_a_module_process(both_ways):
    plugin, module = both_ways
    for name in IN_PROCESS:
        assert f"AnsiballZ_{name}.py" in module.stdout, name
        assert f"AnsiballZ_{name}" not in plugin.stdout.split("TASK [units with become]")[0], name
    for case in AS_MODULE:  # Ansible's normal action: the module process, its temporary directory removed
        assert module_processes(plugin, case) > 0, case
        assert plugin.task("localhost", case)["event"] == "runner_on_ok", case
    assert "rm -f -r" in plugin.stdout.split("TASK [units with become]")[1]


def load_plugin():
    spec = importlib.util.spec_from_file_location("controller_module", PLUGINS / "controller_module.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return plugin


@pytest.mark.parametrize(("transport", "become", "in_process"), [
    ("local", False, True), ("ansible.builtin.local", False, True), ("ssh", False, False),
    ("ansible.builtin.ssh", False, False), ("local", True, False)])
def test_in_process_only_on_the_controller_as_its_user(transport, become, in_process):
    assert load_plugin().runs_on_controller(transport, become) is in_process


def test_every_plugin_file_is_the_shared_plugin_for_a_module_with_run_and_argument_spec():
    files = sorted(p.stem for p in PLUGINS.glob("*.py") if p.stem != "controller_module")
    assert files == sorted(IN_PROCESS)
    for name in files:
        text = (PLUGINS / f"{name}.py").read_text()
        assert 'with_name("controller_module.py")' in text, name
        module = load_plugin().load_module_file_at(REPO_ROOT / "library" / f"{name}.py", name)
        assert callable(module.run), name
        assert isinstance(module.ARGUMENT_SPEC, dict), name

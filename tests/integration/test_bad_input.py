"""Bad input a new user writes, run through the real playbooks on this machine (local connection).

Each case shows the message the user gets and that nothing changed: the run stops in preflight (the
job's own plays never start), no task reported a change, the temporary stack root (and `current`) was
never made, no model unit or environment file appeared, no lock or report was written.
"""

from __future__ import annotations

import glob
import os
import textwrap
from pathlib import Path

import pytest
import yaml
from ansible_run import REPO_ROOT, run_playbook

pytestmark = pytest.mark.integration

PLAYBOOKS = REPO_ROOT / "playbooks"
MODELS_INVENTORY = "Check the served models of each host"
MODELS_GPU = "Check the served models against the host's GPUs (hosts without gpu_capability)"
VARIABLES = "Check project variables against every role's argument specs"
TARGETS = "Require the job's hosts in the inventory"
# STAND-IN: no GPU here; nvidia-smi replays a real capture from an H200 (capability 9.0)
STAND_IN = str(REPO_ROOT / "tests" / "stand_ins" / "nvidia-smi")
H200 = {"NVIDIA_SMI_RECORDING": str(REPO_ROOT / "tests" / "stand_ins" / "nvidia-smi-recordings"
                                    / "h200-device-2026-11-30")}
UNITS = "/etc/systemd/system/sglang-*.service"


def host_state(tmp_path: Path) -> dict:
    """What a run could have changed: the temporary stack tree, model units, env files, locks, reports."""
    def listing(path: Path):
        return sorted(str(p) for p in path.rglob("*")) if path.exists() else None

    return {"stack tree": listing(tmp_path / "opt"), "units": sorted(glob.glob(UNITS)),
            "env files": sorted(glob.glob("/etc/sglang/*.env")), "locks": listing(REPO_ROOT / "locks"),
            "reports": listing(REPO_ROOT / "reports")}


def inventory(tmp_path: Path, host_vars: str, children: str = "") -> Path:
    """localhost over a local connection, every path of the stack under tmp_path, plus ``host_vars`` and
    the groups of ``children`` (YAML under all.children)."""
    path = tmp_path / "hosts.yml"
    path.write_text(textwrap.dedent(f"""\
        all:
          hosts:
            localhost:
              ansible_connection: local
              ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
              stack_root: {tmp_path}/opt/stacks
              stack_tools_dir: {tmp_path}/opt/tools
              stack_uv_cache_dir: {tmp_path}/opt/uv-cache
        """) + textwrap.indent(textwrap.dedent(host_vars), " " * 6)
        + ("  children:\n" + textwrap.indent(textwrap.dedent(children), " " * 4) if children else ""))
    return path


def run_unchanged(tmp_path, playbook, inventory_path, stop_at, **kwargs):
    """Run ``playbook`` (a file of playbooks/, or a list of plays); require a failure at task ``stop_at``
    with nothing changed. Returns its message."""
    before = host_state(tmp_path)
    result = run_playbook(PLAYBOOKS / playbook if isinstance(playbook, str) else playbook, inventory_path,
                          **kwargs)
    assert result.rc != 0, result.stdout
    [failed] = [res for res in result.results["localhost"] if res["event"] == "runner_on_failed"]
    assert failed["task"] == stop_at, failed
    assert result.results["localhost"][-1] is failed  # nothing ran after it
    assert not any(result.stats.get("changed", {}).values())
    assert host_state(tmp_path) == before
    assert not (tmp_path / "opt" / "stacks" / "current").exists()
    assert "Traceback" not in result.stdout
    return failed["msg"]


CHAT = "{name: chat, model_path: /models/chat}"


@pytest.mark.parametrize(("host_vars", "stop_at", "expected"), [
    # an attention backend without kernels for the inventory's capability (FA3 is Ampere/Hopper only)
    ("""\
     gpu_capability: "12.0"
     sglang_service_models:
       - {name: chat, model_path: /models/chat, attention_backend: fa3}
     """, MODELS_INVENTORY,
     "1 problem with sglang_service_models: host localhost (targets 12.0 from gpu_capability in the "
     "inventory): sglang_service_models[0].attention_backend: fa3 has no kernels for capability 12.0 (model "
     "'chat'): sglang 0.5.23 runs it on 8.x, 9.x only (FlashAttention 3). Leave attention_backend unset "
     "(sglang picks one for the GPU) or set one that runs there: flashinfer or triton"),
    (f"""\
     gpu_capability: "10.0"
     sglang_service_models:
       - {CHAT}
       - {{name: moe, model_path: /models/moe, port: 30001, moe_runner_backend: hpc_ops}}
     """, MODELS_INVENTORY,
     "1 problem with sglang_service_models: host localhost (targets 10.0 from gpu_capability in the "
     "inventory): sglang_service_models[1].moe_runner_backend: hpc_ops has no kernels for capability 10.0 "
     "(model 'moe'): sglang 0.5.23 runs it on 9.x only (HPC-Ops). Leave moe_runner_backend unset (sglang "
     "picks one for the GPU) or set one that runs there: auto or triton"),
    # two models on one port: the second would never bind
    ("""\
     sglang_service_models:
       - {name: chat, model_path: /models/chat, port: 30000}
       - {name: embed, model_path: /models/embed}
     """, MODELS_INVENTORY,
     "1 problem with sglang_service_models: host localhost: sglang_service_models[1].port: 30000 (the "
     "default: port is not set) is also the port of sglang_service_models[0] (chat); each model on a host "
     "needs its own port"),
    # two models with one name: the second would overwrite the first's unit
    (f"""\
     sglang_service_models:
       - {CHAT}
       - {{name: chat, model_path: /models/other, port: 30001}}
     """, MODELS_INVENTORY,
     "1 problem with sglang_service_models: host localhost: sglang_service_models[1].name: 'chat' is also "
     "the name of sglang_service_models[0]; each model needs its own name (it names the unit "
     "sglang-chat.service)"),
    # weights pinned to a branch: two hosts staging it a day apart could serve different weights
    (f"""\
     sglang_service_models:
       - {CHAT}
       - {{name: kimi, port: 30001, weights: {{repo: moonshotai/Kimi-K2.5, revision: main}}}}
     """, MODELS_INVENTORY,
     "1 problem with sglang_service_models: host localhost: sglang_service_models[1].weights.revision: main "
     "is a branch and moves; pin a commit sha or a tag"),
])
def test_served_models_refused_before_any_change(tmp_path, host_vars, stop_at, expected):
    message = run_unchanged(tmp_path, "site.yml", inventory(tmp_path, host_vars), stop_at)
    assert message == expected


def test_backend_checked_against_the_gpus_when_the_inventory_names_no_capability(tmp_path):
    host_vars = f"""\
        preflight_nvidia_smi: {STAND_IN}
        sglang_service_models:
          - {{name: chat, model_path: /models/chat, attention_backend: trtllm_mla}}
        """
    message = run_unchanged(tmp_path, "site.yml", inventory(tmp_path, host_vars), MODELS_GPU, envvars=H200)
    assert message == (
        "1 problem with sglang_service_models: host localhost (targets 9.0 from the host's GPUs): "
        "sglang_service_models[0].attention_backend: trtllm_mla has no kernels for capability 9.0 (model "
        "'chat'): sglang 0.5.23 runs it on 10.x, 11.x, 12.x only (TensorRT-LLM MLA). Leave attention_backend "
        "unset (sglang picks one for the GPU) or set one that runs there: flashinfer or triton")


def test_backend_checked_against_the_default_targets_without_gpu_or_capability(tmp_path):
    host_vars = """\
        sglang_service_models:
          - {name: chat, model_path: /models/chat, attention_backend: cutedsl_mla}
        """
    message = run_unchanged(tmp_path, "site.yml", inventory(tmp_path, host_vars), MODELS_GPU)
    assert message == (
        "1 problem with sglang_service_models: host localhost (targets 10.0, 12.0 from the default targets: "
        "no gpu_capability and no GPU seen): sglang_service_models[0].attention_backend: cutedsl_mla has no "
        "kernels for capability 12.0 (model 'chat'): sglang 0.5.23 runs it on 10.x only (CuteDSL MLA). Leave "
        "attention_backend unset (sglang picks one for the GPU) or set one that runs there: flashinfer or "
        "triton")


def test_secrets_written_as_numbers_are_refused_without_their_values(tmp_path):
    host_vars = """\
        sglang_service_api_key: 0123456
        sglang_service_secrets: {HF_TOKEN: 98765, OTHER: "fine"}
        """
    path = inventory(tmp_path, host_vars)
    assert yaml.safe_load(path.read_text())["all"]["hosts"]["localhost"]["sglang_service_api_key"] == 42798
    before = host_state(tmp_path)
    result = run_playbook(PLAYBOOKS / "site.yml", path)
    assert result.rc != 0
    failed = result.task("localhost", VARIABLES)
    hint = ("quote it in YAML (unquoted digits are a number: leading zeros are lost, and a leading 0 makes "
            "it octal); the value is not shown")
    assert failed["msg"] == (
        f"2 inventory problems: host localhost: sglang_service_api_key must be a string, got int; {hint}; "
        f"host localhost: sglang_service_secrets.HF_TOKEN must be a string, got int; {hint}")
    assert result.results["localhost"][-1]["task"] == VARIABLES
    assert not any(result.stats.get("changed", {}).values())
    assert host_state(tmp_path) == before
    for secret in ("42798", "0123456", "98765"):
        assert secret not in result.stdout
        assert secret not in str(failed)


def test_good_models_pass_preflight(tmp_path):
    host_vars = """\
        gpu_capability: "9.0"
        preflight_nvidia_smi: STAND_IN
        sglang_service_api_key: "0123456"
        sglang_service_models:
          - {name: chat, model_path: /models/chat, attention_backend: fa3}
          - {name: embed, model_path: /models/embed, port: 30001, moe_runner_backend: hpc_ops}
        """.replace("STAND_IN", STAND_IN)
    result = run_playbook(PLAYBOOKS / "preflight.yml", inventory(tmp_path, host_vars), envvars=H200)
    assert result.rc == 0, result.stdout
    checked = result.task("localhost", MODELS_INVENTORY)
    assert (checked["problems"], checked["capabilities"]) == ([], ["9.0"])
    assert result.task("localhost", MODELS_GPU)["event"] == "runner_on_skipped"
    assert "sglang_service_api_key" in result.task("localhost", VARIABLES)["checked"]


def test_extra_packages_for_a_locked_stack_are_refused_before_any_change(tmp_path):
    """A stack from its lock holds exactly the lock's files: sglang_service's extra packages would be left
    out without a word, so preflight refuses them, naming them and the two ways out."""
    host_vars = """\
        sglang_service_extra_packages: ["py-spy==0.4.3"]
        """
    message = run_unchanged(tmp_path, "site.yml", inventory(tmp_path, host_vars),
                            "Refuse extra packages for a stack installed from its lock")
    assert message == (
        "localhost: sglang_service_extra_packages (py-spy==0.4.3) cannot go into a stack installed from its "
        "profile's lock, which holds exactly the lock's files: they would not be installed. Leave them "
        "out, or set stack_use_lock: false to resolve the stack on the host from the profile's pins with "
        "them (not reproducible). Nothing was changed.")


LOCAL = REPO_ROOT / "inventory" / "local"


@pytest.mark.parametrize(("playbook", "extravars", "expected"), [
    ("snapshot.yml", {"snapshot_host": "gpu-9", "snapshot_name": "good"},
     "snapshot.yml targets no host: snapshot_host 'gpu-9' matches no host of the inventory; give the host to "
     "capture, -e snapshot_host=HOST (one host of the inventory). Nothing was changed."),
    ("snapshot.yml", {"snapshot_name": "good"},
     "snapshot.yml targets no host: no snapshot_host given; give the host to capture, -e snapshot_host=HOST "
     "(one host of the inventory). Nothing was changed."),
    ("reproduce.yml", {"reproduce_lock": "locks/good.lock.yml"},
     "reproduce.yml targets no host: no reproduce_hosts given; give the hosts to make match the lock, "
     "-e reproduce_hosts=PATTERN (a host, group or pattern of the inventory). Nothing was changed."),
    ("reproduce.yml", {"reproduce_hosts": "gpus:&hopper", "reproduce_lock": "locks/good.lock.yml"},
     "reproduce.yml targets no host: reproduce_hosts 'gpus:&hopper' matches no host of the inventory; give "
     "the hosts to make match the lock, -e reproduce_hosts=PATTERN (a host, group or pattern of the "
     "inventory). Nothing was changed."),
    ("rolling_rebuild.yml", {},
     "rolling_rebuild.yml targets no host: rolling_rebuild_hosts 'sglang_replicas' (the default) matches no "
     "host of the inventory; put the model hosts in group sglang_replicas (the gateway's replica group), or "
     "give them with -e rolling_rebuild_hosts=PATTERN. Nothing was changed."),
    ("rolling_rebuild.yml", {"rolling_rebuild_hosts": "replicas"},
     "rolling_rebuild.yml targets no host: rolling_rebuild_hosts 'replicas' matches no host of the "
     "inventory; put the model hosts in group sglang_replicas (the gateway's replica group), or give them "
     "with -e rolling_rebuild_hosts=PATTERN. Nothing was changed."),
])
def test_a_job_that_targets_nothing_fails_and_says_why(tmp_path, playbook, extravars, expected):
    assert run_unchanged(tmp_path, playbook, LOCAL, TARGETS, extravars=extravars) == expected


@pytest.mark.parametrize(("playbook", "extravars"), [
    ("rolling_rebuild.yml", {}),
    # reproduce moves hosts with the rollout's walk, so the same rule holds there
    ("reproduce.yml", {"reproduce_hosts": "localhost", "reproduce_lock": "locks/good.lock.yml"}),
])
def test_a_rollout_of_part_of_a_multi_node_model_is_refused(tmp_path, playbook, extravars):
    """A multi-node model's ranks restart together, so the rollout moves its hosts as one unit: a host of
    its group left out of the hosts to roll is refused in preflight, naming the model and the host, before
    anything changes."""
    path = inventory(tmp_path, f"""\
        sglang_service_models:
          - {CHAT}
          - {{name: big, model_path: /models/big, port: 30001, tp_size: 2, nodes_group: big_tp}}
        """, children="""\
        sglang_replicas:
          hosts:
            localhost:
        big_tp:
          hosts:
            localhost:
            other-node:
        """)
    stop_at = "Check that each multi-node model's hosts are rolled together"
    message = run_unchanged(tmp_path, playbook, path, stop_at, extravars=extravars)
    assert message == (
        "model 'big' spans localhost, other-node (nodes_group 'big_tp'), but other-node is not among the "
        "hosts to roll: its ranks restart together, so roll all of them or none. Nothing was changed.")


def test_a_rollout_of_hosts_serving_models_without_a_gateway_is_refused(tmp_path):
    """A host restarted in rotation drops the requests sent to it: with no gateway host, the rollout's plan
    refuses hosts that serve models (naming them) unless rolling_rebuild_without_gateway says so."""
    path = inventory(tmp_path, f"""\
        sglang_service_models:
          - {CHAT}
        """, children="""\
        sglang_replicas:
          hosts:
            localhost:
        """)
    message = run_unchanged(tmp_path, "rolling_rebuild.yml", path,
                            "Check the rollout's settings and the gateway group")
    assert message == (
        "group sglang_gateway has no host: a host restarted in rotation drops the requests sent to it "
        "(localhost serve models). Add the gateway hosts, or set rolling_rebuild_without_gateway: true to "
        "restart without taking hosts out of rotation (requests in flight still drain).")


def test_the_gateway_without_the_profiles_tools_says_what_to_run_first(tmp_path):
    """sglang_service's gateway entry point on a host where no stack entry point ran: a message, not an
    undefined variable, before anything changes."""
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Gateway",
         "ansible.builtin.include_role": {"name": "sglang_service", "tasks_from": "gateway"},
         "vars": {"sglang_service_state_dir": str(tmp_path / "state")}}]}]
    message = run_unchanged(tmp_path, play, LOCAL, "Require the profile's uv and smg version for the gateway")
    assert message == (
        "localhost: the gateway is installed with the profile's uv and smg version "
        "(sglang_service_gateway_uv, sglang_service_gateway_version; by default stack_uv and "
        "stack_profile_data.smg.version), and neither the stack role's `tools` nor its `main` entry point "
        "ran on this host. Run one of them first (playbooks/site.yml does), or set both variables. Nothing "
        "was changed.")
    assert not (tmp_path / "state").exists()


def test_snapshot_of_a_group_is_refused(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  children:\n    gpus:\n      hosts:\n"
                    "        a: {ansible_connection: local}\n        b: {ansible_connection: local}\n")
    result = run_playbook(PLAYBOOKS / "snapshot.yml", path, extravars={"snapshot_host": "gpus",
                                                                       "snapshot_name": "good"})
    assert result.rc != 0
    [failed] = result.task_runs(TARGETS).values()
    assert failed["msg"] == (
        "snapshot.yml captures one host: snapshot_host 'gpus' matches 2 hosts (a, b); give the host to "
        "capture, -e snapshot_host=HOST (one host of the inventory). Nothing was changed.")
    assert not (REPO_ROOT / "locks" / "good.lock.yml").exists()


def test_verify_with_a_missing_lock_file_names_it(tmp_path):
    lock = tmp_path / "locks" / "gone.lock.yml"
    message = run_unchanged(tmp_path, "verify.yml", LOCAL,
                            "Require the lock file to compare with (when one is given)",
                            extravars={"verify_lock_file": str(lock)})
    assert message == (
        f"verify_lock_file: {lock} is not a file. Give a lock written by playbooks/snapshot.yml "
        "(-e verify_lock_file=locks/NAME.lock.yml, relative to the repository root, or absolute), or leave "
        "verify_lock_file out to verify without drift checks.")


def test_verify_with_a_relative_missing_lock_names_the_resolved_path(tmp_path):
    message = run_unchanged(tmp_path, "verify.yml", LOCAL,
                            "Require the lock file to compare with (when one is given)",
                            extravars={"verify_lock_file": "locks/nope.lock.yml"})
    assert message.startswith(f"verify_lock_file: {REPO_ROOT}/locks/nope.lock.yml is not a file.")


def test_stack_keep_counts_the_protected_previous_stack(tmp_path):
    """The stack role's own `switch` (the end of `activate`), as a rolling rebuild runs it: stack_keep 2
    leaves `current` and exactly 2 old stacks, the protected previous one among them."""
    root = tmp_path / "stacks"
    names = {age: f"stable-{age * 12}" for age in "12345"}  # 5 is the newest
    for age, name in names.items():
        (root / name / "bin").mkdir(parents=True)
        if age != "5":  # the one switched to is sealed by the switch
            sealed = root / name / ".sealed"
            sealed.write_text("fingerprint\n")
            os.utime(sealed, (int(age) * 1000, int(age) * 1000))
    (root / "current").symlink_to(names["4"])
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"stack_root": str(root)}, "tasks": [
        {"name": "Read the stack layout",
         "ansible.builtin.include_role": {"name": "stack", "tasks_from": "layout"}},
        {"name": "Switch", "ansible.builtin.include_role": {"name": "stack", "tasks_from": "switch"},
         "vars": {"stack_switch_name": names["5"], "stack_switch_fingerprint": "f" * 64,
                  "stack_protect": [names["4"]]}}]}]
    result = run_playbook(play, LOCAL)
    assert result.rc == 0, result.stdout
    assert sorted(os.listdir(root)) == sorted(["current", names["5"], names["4"], names["3"]])
    assert os.readlink(root / "current") == names["5"]
    assert result.task("localhost", "Find old stacks beyond stack_keep")["remove"] == [names["1"], names["2"]]


def test_a_profile_that_does_not_exist_is_named_with_the_profiles_there_are(tmp_path):
    """A misspelt profile stops preflight on the controller, with the file it looked for and the profiles
    it has, before any host is changed."""
    message = run_unchanged(tmp_path, "site.yml", inventory(tmp_path, "stack_profile: stabel\n"),
                            "Require the profile on the controller")
    profiles = sorted(path.stem for path in (REPO_ROOT / "profiles").glob("*.yml"))
    assert message == (f"stack_profile 'stabel': there is no profile {REPO_ROOT}/profiles/stabel.yml. "
                       f"Profiles in {REPO_ROOT}/profiles: {', '.join(profiles)}")
    assert "stable" in profiles


def test_each_distinct_profile_is_checked_once_and_fails_only_the_hosts_that_name_it(tmp_path):
    """Three hosts, two of them on the stable profile and one on a copy of it with a misspelt key: the
    controller checks each profile once (one run, two items, on the first host), and the host that names
    the bad one fails with the check's message; preflight's any_errors_fatal stops the run before the
    job's plays, and nothing changed."""
    bad = tmp_path / "profiles" / "bad.yml"
    bad.parent.mkdir()
    bad.write_text((REPO_ROOT / "profiles" / "stable.yml").read_text().replace("cuda_tag:", "cuda_tagg:", 1))
    local = ('ansible_connection: local, ansible_python_interpreter: "{{ ansible_playbook_python }}", '
             f"stack_root: {tmp_path}/opt/stacks")
    path = tmp_path / "hosts.yml"
    path.write_text(f"all:\n  hosts:\n    a: {{{local}}}\n    b: {{{local}, stack_profile: {bad}}}\n"
                    f"    c: {{{local}}}\n")
    before = host_state(tmp_path)
    result = run_playbook(PLAYBOOKS / "site.yml", path)
    assert result.rc != 0
    [checked] = result.task_runs("Check each profile and lock the play's hosts name, once each").values()
    assert [item["item"]["profile_path"] for item in checked["results"]] == [
        str(REPO_ROOT / "profiles" / "stable.yml"), str(bad)]
    verdicts = result.task_runs("Require the host's profile and lock to have passed the check")
    assert {host: res["event"] for host, res in verdicts.items()} == {
        "a": "runner_on_ok", "b": "runner_on_failed", "c": "runner_on_ok"}
    assert verdicts["b"]["msg"].startswith(f"{bad}: unknown key 'torch.cuda_tagg' (did you mean "
                                           "'torch.cuda_tag'?)")
    assert not any(res["event"] == "runner_on_failed" for host in "ac" for res in result.results[host])
    assert not any(result.stats.get("changed", {}).values())
    assert host_state(tmp_path) == before

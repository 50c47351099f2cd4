"""The molecule scenario (tests/molecule/fleet) passes its full sequence on fleet hosts, converging the
project's own site playbook (preflight and every stage role in it) plus the harness's probe service, and
leaves nothing: no host, no ssh connection master, no claim."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fleet import Fleet, claims
from fleet.state import state_dir
from fleet_present import present
from stackrun import fill_wheelhouse

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[2]
SEQUENCE = ("create", "check", "converge", "idempotence", "side_effect", "verify", "destroy")
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", re.MULTILINE)
TIMEOUT = 1800
# Two hosts: the fewest that show a rolling order; each holds a whole torch 2.14.1 (cu130) stack, ~7 GB
# and ~2 minutes of unpacking on a 2-core machine.
HOSTS = ("mol-1", "mol-2")


def test_molecule_fleet_scenario(fleet_base):
    # site.yml installs from the fleet's wheelhouse only: torch 2.14.1 and its dependencies, uv, and
    # the released sglang-kernel wheel (sgl_kernel's auto mode takes it for the default targets)
    fill_wheelhouse()
    # A fleet name of this session's own: concurrent runs on one machine must not share hosts. It is
    # owned by this process, so a later session's gc() removes it if this one is killed.
    name = f"m{os.getpid() % 10**8}"
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
           "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1", "MOLECULE_GLOB": "molecule/*/molecule.yml",
           "SGLANG_FLEET_MOLECULE_NAME": name, "SGLANG_FLEET_OWNER_PID": str(os.getpid()),
           "SGLANG_FLEET_MOLECULE_STATE": str(state_dir(name) / "state.json")}
    state_file, recorded, output, masters = state_dir(name) / "state.json", None, [], set()
    try:
        proc = subprocess.Popen([str(Path(venv_bin) / "molecule"), "test", "-s", "fleet"], cwd=TESTS, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + TIMEOUT
        while proc.poll() is None:  # keep the fleet's record: its hosts are checked after destroy
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"molecule test ran past {TIMEOUT} s")
            try:
                data = json.loads(state_file.read_text())
                recorded = data if data["phase"] == "ready" else recorded
                masters |= {p.name for p in claims.control_dir(name).iterdir() if p.is_socket()}
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        reader.join()
        out = re.sub(r"\x1b\[[0-9;]*m", "", "".join(output))
        assert proc.returncode == 0, out[-6000:]
        for action in SEQUENCE:
            done = re.search(rf"^fleet > {action}: Executed: Successful$", out, re.MULTILINE)
            assert done, f"molecule action {action} did not succeed"
        assert len(re.findall(r"^fleet > check: Executed: Successful$", out, re.MULTILINE)) == 2
        sections = re.findall(r"^INFO\s+\[fleet > (\w+)\] Executing$(.*?)^INFO\s+\[fleet > \1\] Executed",
                              out, re.MULTILINE | re.DOTALL)
        first_check, second_check = [text for action, text in sections if action == "check"]
        # converge ran the project's own site playbook (preflight, every stage, the summary) on every host
        (converge,) = [text for action, text in sections if action == "converge"]
        tasks = re.findall(r"^TASK \[(.*?)\]", converge, re.MULTILINE)
        for task in ("preflight : Require ansible-core within the supported window",
                     "preflight : Check project variables against every role's argument specs",
                     "preflight : Report the operating system", "preflight : Report the GPUs",
                     "cuda_toolchain : Check the toolkit against the CUDA release and the target "
                     "capabilities",
                     "pytorch : Require torch code for every target capability",
                     "sgl_kernel : Check the variant the loader picks for this host's capability (import "
                     "test with a GPU)",
                     "stack : Point current at the stack",
                     "Show the host summary"):
            assert task in tasks, (task, tasks)
        for host in HOSTS:
            assert re.search(rf"{host}: Debian\s+12\.\d+\s+\(bookworm\).*?-\s+supported", converge,
                             re.DOTALL), converge[-6000:]
            no_gpu = rf"{host}: no\s+usable\s+GPU\s+\(nvidia-smi\s+not\s+found"
            assert re.search(no_gpu, converge), converge[-6000:]
        # the first converge changes every host (the stack stages and the probe service), fails none
        converged = _recap(converge)
        assert sorted(converged) == list(HOSTS)
        assert all(changed > 5 and failed == 0 for changed, failed in converged.values()), converged
        # on fresh hosts check mode would install: the stack stages and the probe's 3 changes, no failure
        first = _recap(first_check)
        assert sorted(first) == list(HOSTS)
        assert all(changed > 3 and failed == 0 for changed, failed in first.values()), first
        # check mode on converged hosts: nothing to change, nothing failing
        assert _recap(second_check) == {host: (0, 0) for host in HOSTS}, \
            _changed_tasks(second_check)
        verified = re.search(r"=+ (\d+) passed", out)
        assert verified, "the testinfra verify step ran no test"
        # probe: 3 checks x 2 hosts + the cross-host rolling-order check; stack: 2 checks x 2 hosts
        assert int(verified.group(1)) == 11
        assert Fleet(name).state is None
        assert recorded, f"no ready fleet {name} seen while molecule ran"
        assert recorded["owner"]["pid"] == os.getpid()
        assert [h["name"] for h in recorded["hosts"]] == list(HOSTS)
        # the plays' ssh connection masters lived in the fleet's directory, where its `down` closes
        # them; after destroy no connection to a host is left, and the name is released
        assert {f"{h['ip']}-22-root" for h in recorded["hosts"]} <= masters, masters
        assert present(recorded) == []
    finally:
        Fleet(name).down()



def _changed_tasks(play_output: str) -> list[str]:
    """The tasks that reported a change in a play's output (for a failure message)."""
    task, found = None, []
    for line in play_output.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed: ") and task not in found:
            found.append(task)
    return found


def _recap(play_output: str) -> dict:
    """{host: (changed, failed)} from a play's PLAY RECAP."""
    return {host: (int(changed), int(failed)) for host, changed, failed in RECAP.findall(play_output)}

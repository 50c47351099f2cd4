#!/usr/bin/python
"""Ansible module: one step of the SGLang readiness gate, or its diagnosis (read-only)."""

DOCUMENTATION = r"""
---
module: sglang_readiness
short_description: Probe an SGLang server for readiness, or diagnose why it never became ready
description:
  - C(mode=probe) polls the health URL (C(/health_generate), which answers 200 only after a real
    one-token generation) for at most C(step) seconds and reports the elapsed time since the gate began, the
    unit's state and its last log line. The role repeats it until C(finished), printing each step.
  - A start that crashed (the unit restarted or failed since the gate began) or outlasted C(bound)
    finishes the gate unready.
  - C(mode=diagnose) collects the journal's tail, nvidia-smi when present, the unit's process tree with
    states, a Python stack dump with py-spy when installed and Xid lines from the kernel log when
    readable, and names the likely cause from the logs (OOM, driver hang, NCCL over PCIe, warmup
    timeout, cold JIT, crash, hang after load).
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  mode:
    description: C(probe) (one gate step) or C(diagnose).
    type: str
    choices: [probe, diagnose]
    default: probe
  url:
    description: Health URL to poll (mode=probe).
    type: str
    default: http://127.0.0.1:30000/health_generate
  unit:
    description: The systemd unit of the server; empty skips unit state and journal.
    type: str
    default: ""
  step:
    description: Seconds this probe step may poll before it returns.
    type: int
    default: 10
  bound:
    description: Seconds the whole gate may take.
    type: int
    default: 1800
  started:
    description: When the gate began (epoch seconds, from the first step's C(started)); 0 means now.
    type: float
    default: 0
  restarts_at_start:
    description: The unit's NRestarts when the gate began (from the first step); -1 means now.
    type: int
    default: -1
  api_key:
    description: Bearer token for the health URL, when the server requires one.
    type: str
    default: ""
  journal_lines:
    description: Journal lines to collect (mode=diagnose).
    type: int
    default: 80
  py_spy:
    description: py-spy to run for a stack dump (mode=diagnose); empty, or a path that does not exist,
      looks it up on PATH.
    type: str
    default: ""
  crashed:
    description: The gate saw a crash (mode=diagnose).
    type: bool
    default: false
  timed_out:
    description: The gate ran out of time (mode=diagnose).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
seealso:
  - module: sglang_server_args
"""

EXAMPLES = r"""
- name: One step of the readiness gate
  sglang_readiness:
    url: http://127.0.0.1:30000/health_generate
    unit: sglang-main.service
    started: "{{ gate.started | default(0) }}"
  register: gate
"""

RETURN = r"""
ready:
  description: The health URL answered 200 (mode=probe).
  returned: always
  type: bool
finished:
  description: The gate is over (ready, crashed or out of time).
  returned: always
  type: bool
crashed:
  description: The unit restarted or failed since the gate began.
  returned: always
  type: bool
timed_out:
  description: The gate outlasted C(bound).
  returned: always
  type: bool
elapsed:
  description: Seconds since the gate began.
  returned: always
  type: float
started:
  description: When the gate began (epoch seconds), to pass to the next step.
  returned: always
  type: float
restarts_at_start:
  description: The unit's NRestarts when the gate began, to pass to the next step.
  returned: always
  type: int
status:
  description: Last HTTP status, or null when nothing answered.
  returned: always
  type: int
last_log_line:
  description: The unit's newest journal line.
  returned: always
  type: str
unit_state:
  description: ActiveState, SubState, NRestarts, MainPID and Result of the unit.
  returned: always
  type: dict
cause:
  description: Likely cause (mode=diagnose), e.g. oom, driver_hang, nccl_pcie_hang, warmup_timeout,
    cold_jit, crash, hang_after_load, unknown.
  returned: always
  type: str
evidence:
  description: The log line the cause was read from.
  returned: always
  type: str
advice:
  description: What to do about the cause.
  returned: always
  type: str
diagnostics:
  description: Journal tail, nvidia-smi, process tree, py-spy dump and Xid lines (mode=diagnose).
  returned: always
  type: dict
msg:
  description: One line for the operator (progress, or the cause).
  returned: always
  type: str
"""

import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_readiness import (
    _run,
    classify,
    journal,
    process_tree,
    unit_state,
    wait_ready,
)


def probe_step(p):
    now = time.time()
    started = p["started"] or now
    state = unit_state(p["unit"]) if p["unit"] else {}
    restarts0 = p["restarts_at_start"] if p["restarts_at_start"] >= 0 else state.get("n_restarts", 0)
    headers = {"Authorization": f"Bearer {p['api_key']}"} if p["api_key"] else {}
    remaining = started + p["bound"] - now

    def alive():
        current = unit_state(p["unit"]) if p["unit"] else {}
        return not current or (current["active_state"] in ("active", "activating", "reloading")
                               and current["n_restarts"] == restarts0)

    ready, status, text = wait_ready(p["url"], min(p["step"], max(remaining, 0)), headers=headers,
                                     alive=alive)
    state = unit_state(p["unit"]) if p["unit"] else {}
    crashed = bool(state) and not ready and (state["n_restarts"] != restarts0
                                              or state["active_state"] in ("failed", "inactive"))
    elapsed = time.time() - started
    timed_out = not ready and not crashed and elapsed >= p["bound"]
    last = journal(p["unit"], 1) if p["unit"] else []
    last_line = last[-1] if last else ""
    where = (f"unit {state['active_state']}/{state['sub_state']}, restarts {state['n_restarts']}; "
             if state else "")
    msg = (f"elapsed {elapsed:.0f} s of {p['bound']} s: {p['url']} -> {status or text}; {where}"
           f"last log: {last_line[:300]}")
    return {"ready": ready, "finished": ready or crashed or timed_out, "crashed": crashed,
            "timed_out": timed_out, "elapsed": round(elapsed, 1), "started": started,
            "restarts_at_start": restarts0, "status": status, "last_log_line": last_line,
            "unit_state": state, "msg": msg}


def diagnose(p):
    state = unit_state(p["unit"]) if p["unit"] else {}
    lines = journal(p["unit"], p["journal_lines"]) if p["unit"] else []
    diagnostics = {"journal_tail": lines, "process_tree": process_tree(state.get("main_pid", 0))}
    nvidia_smi = shutil.which("nvidia-smi")
    diagnostics["nvidia_smi"] = _run([nvidia_smi], 30) if nvidia_smi else "nvidia-smi not installed"
    py_spy = p["py_spy"] if p["py_spy"] and os.path.exists(p["py_spy"]) else shutil.which("py-spy")
    if py_spy and state.get("main_pid"):
        diagnostics["py_spy"] = _run([py_spy, "dump", "--pid", str(state["main_pid"])], 60)
    else:
        diagnostics["py_spy"] = "py-spy not installed" if not py_spy else "no main process to dump"
    kernel = _run(["dmesg", "--notime"], 10)
    diagnostics["xid"] = [x for x in kernel.splitlines() if "Xid" in x or "NVRM" in x][-20:]
    found = classify(lines + diagnostics["xid"], crashed=p["crashed"], timed_out=p["timed_out"])
    msg = (f"{p['unit'] or 'the server'} is not ready: likely cause {found['cause']}"
           + (f" (log: {found['evidence'][:300]})" if found["evidence"] else "") + f". {found['advice']}")
    return {"ready": False, "finished": True, "crashed": p["crashed"], "timed_out": p["timed_out"],
            "unit_state": state, "diagnostics": diagnostics, "msg": msg, **found}


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["probe", "diagnose"], "default": "probe"},
            "url": {"type": "str", "default": "http://127.0.0.1:30000/health_generate"},
            "unit": {"type": "str", "default": ""},
            "step": {"type": "int", "default": 10},
            "bound": {"type": "int", "default": 1800},
            "started": {"type": "float", "default": 0},
            "restarts_at_start": {"type": "int", "default": -1},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "journal_lines": {"type": "int", "default": 80},
            "py_spy": {"type": "str", "default": ""},
            "crashed": {"type": "bool", "default": False},
            "timed_out": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["step"] <= 0 or p["bound"] <= 0:
        module.fail_json(msg=f"step and bound must be positive seconds, got step={p['step']} "
                             f"bound={p['bound']}")
    try:
        result = probe_step(p) if p["mode"] == "probe" else diagnose(p)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"sglang_readiness failed unexpectedly: {type(exc).__name__}: {exc}")
    defaults = {"ready": False, "finished": False, "crashed": False, "timed_out": False, "elapsed": 0.0,
                "started": p["started"], "restarts_at_start": p["restarts_at_start"], "status": None,
                "last_log_line": "", "unit_state": {}, "cause": "", "evidence": "", "advice": "",
                "diagnostics": {}}
    module.exit_json(changed=False, **{**defaults, **result})


if __name__ == "__main__":
    main()

#!/usr/bin/python
"""Ansible module: write the verify job's report (see module_utils/verify_report.py)."""

DOCUMENTATION = r"""
---
module: verify_report
short_description: Summarise per-host verify checks and write them as Markdown and JSON
description:
  - Takes each host's checks (C(check), C(status) C(ok)/C(fail)/C(skip), C(detail)) and returns the
    fleet summary and a terminal table.
  - "The doctor: every check belongs to a stage of the serving chain, in the order it is built: driver,
    toolkit, torch, kernel, weights, service, speculative acceptance, gateway (then lock, for drift).
    A host's checks are ordered by stage; each failure and warning gets its likely cause and the fix;
    the host's first failing check is its C(fix_first) line. The terminal table's first lines, and the
    Markdown's first lines under the title, are the fix-first line of each failing host."
  - "Adding a check (for example C(weights)) is one line in the C(DOCTOR) table of
    module_utils/verify_report.py: C(Diagnosis(\"weights\", \"weights\", \"<likely cause>\", \"<fix>\")),
    plus the code in C(host_checks) (or any task) that reports the check. A check may carry its own
    C(cause) and C(fix) when it knows the failure better than the table; a check the table does not
    know is placed after every stage, in stage C(other)."
  - With O(dest), writes C(verify-<stamp>.md) and C(verify-<stamp>.json) there, and the same content as
    C(verify.md) and C(verify.json) (the newest report). Reports C(changed) when it wrote files.
  - Runs on the controller (delegate it to localhost); it never touches a managed host.
version_added: "0.2.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  hosts:
    description: >-
      Host name to its list of checks (C(check), C(status) C(ok)/C(warn)/C(fail)/C(skip), C(detail)).
    type: dict
    required: true
  dest:
    description: Directory for the report files; omit to only return the summary.
    type: path
  stamp:
    description: Time stamp used in the file names and the report, for example C(20261201T101500Z).
    type: str
    default: ""
  fail_on_failed:
    description: Fail when any host has a failed check (after writing the report).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: In check mode the files are not written; the summary is returned all the same.
  diff_mode:
    support: none
    description: No diff is produced.
"""

EXAMPLES = r"""
- name: Write the fleet report
  verify_report:
    hosts: "{{ dict(ansible_play_hosts_all
               | zip(ansible_play_hosts_all | map('extract', hostvars, 'verify_checks'))) }}"
    dest: "{{ playbook_dir }}/../reports"
    stamp: "{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
report:
  description: >-
    The summary: C(hosts), each with C(host), C(status), C(fix_first) (the line that says what to fix
    first, or null) and its C(checks) in chain order (C(check), C(stage), C(status), C(detail), and for
    a failure or warning C(cause) and C(fix)); C(status); C(counts); C(fix_first) (the failing hosts'
    lines).
  returned: always
  type: dict
  sample:
    status: fail
    counts: {hosts: 1, passed: 0, failed: 1}
    fix_first: ["gpu-1: fix the driver stage first. topology: 12 of 28 GPU pairs cannot use peer-to-peer
      over PCIe: ... Likely cause: PCIe ACS ... Fix: disable ACS ..."]
    hosts:
      - host: gpu-1
        status: fail
        fix_first: "gpu-1: fix the driver stage first. ..."
        checks:
          - {check: topology, stage: driver, status: fail, detail: "...", cause: "...", fix: "..."}
table:
  description: The summary as a fixed-width text table.
  returned: always
  type: str
files:
  description: Files written (empty in check mode or without O(dest)).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.verify_report import (
    ReportError,
    render_json,
    render_markdown,
    render_table,
    summarize,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "hosts": {"type": "dict", "required": True},
            "dest": {"type": "path"},
            "stamp": {"type": "str", "default": ""},
            "fail_on_failed": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        run(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"verify_report failed unexpectedly: {type(exc).__name__}: {exc}")


def run(module):
    params = module.params
    try:
        report = summarize(params["hosts"])
    except ReportError as exc:
        module.fail_json(msg=str(exc))
    table, files = render_table(report), []
    if params["dest"] and not module.check_mode:
        try:
            os.makedirs(params["dest"], exist_ok=True)
            contents = {"md": render_markdown(report, generated=params["stamp"]),
                        "json": render_json(report, generated=params["stamp"])}
            suffix = f"-{params['stamp']}" if params["stamp"] else ""
            for extension, text in contents.items():
                for name in dict.fromkeys([f"verify{suffix}.{extension}", f"verify.{extension}"]):
                    path = os.path.join(params["dest"], name)
                    with open(path, "w") as handle:
                        handle.write(text + "\n")
                    files.append(path)
        except OSError as exc:
            module.fail_json(msg=f"cannot write the report to {params['dest']}: {exc}", report=report,
                             table=table, files=files)
    result = {"changed": bool(files), "report": report, "table": table, "files": files}
    if params["fail_on_failed"] and report["status"] == "fail":
        failed = [h["host"] for h in report["hosts"] if h["status"] == "fail"]
        module.fail_json(msg=f"verify failed on {', '.join(failed)}; see the table and {params['dest']}",
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

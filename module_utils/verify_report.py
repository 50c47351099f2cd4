"""The verify job's report: per host, one line per check, rendered as a terminal table, Markdown and JSON,
with a doctor: where the serving chain breaks, the likely cause and the fix, and what to fix first.

Each host contributes a list of checks ``{"check", "status", "detail"}`` where status is ``ok``,
``warn`` (reported, not failing: e.g. a library of the environment without code for this GPU that the
served model may never load), ``fail`` or ``skip`` (a check that cannot apply, e.g. the import test on
a GPU-less host: said, never hidden); a check may bring its own ``cause`` and ``fix`` when it knows
better than the table below. A host passes when none of its checks failed; the fleet passes when every
host does.

The doctor: every check belongs to a stage of the chain a model host is built in (``STAGES``). A host's
checks are ordered by stage, and its first failing check is what to fix first: a later failure (a
service that does not answer after a driver that is not loaded) often follows from it.

Stdlib only, Python 3.8+.
"""

import collections
import json

from ansible.module_utils.gpu_topology import topology_check

STATUSES = ("ok", "warn", "fail", "skip")
# The serving chain in the order it is built; "lock" (drift from a lock) breaks nothing by itself.
STAGES = ("driver", "toolkit", "torch", "kernel", "weights", "service", "speculative acceptance", "gateway",
          "lock")

Diagnosis = collections.namedtuple("Diagnosis", "check stage cause fix")
# One line per check: its stage, the likely cause of a failure and the fix. A new check (say "weights")
# is one more line here, plus the code in host_checks that reports it. Checks of one stage keep the
# order of this table.
DOCTOR = (
    Diagnosis("gpu", "driver", "nvidia-smi cannot see the GPUs: the driver is not installed or not loaded",
              "run playbooks/nvidia_driver.yml on the host (nvidia_driver_reboot_ok: true lets it reboot)"),
    Diagnosis("driver", "driver", "the driver was upgraded without a reboot: the loaded kernel module is "
              "older than the user-space driver", "reboot the host, or run playbooks/nvidia_driver.yml with "
              "-e nvidia_driver_reboot_ok=true"),
    Diagnosis("topology", "driver", "PCIe ACS on the switches or root ports, or the IOMMU in translated "
              "mode, sends GPU peer traffic up to the root complex and the driver refuses peer-to-peer; "
              "tensor parallel over these GPUs then hangs at NCCL's first all-reduce", "disable ACS on the "
              "PCIe switches (firmware setting, or setpci -s <bridge> ECAP_ACS+0x6.w=0000 per bridge, or the "
              "kernel's pci=disable_acs_redir=) and put the IOMMU in passthrough (iommu=pt) or off, reboot, "
              "re-run verify (NCCL troubleshooting guide, 'PCI Access Control Services'); until then run "
              "the model with NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce, or on GPUs of one "
              "peer-to-peer group"),
    Diagnosis("cuda", "toolkit", "the CUDA toolkit (nvcc) is missing or broken at the configured path",
              "run playbooks/site.yml --tags cuda_toolchain, or set cuda_toolchain_home to the toolkit"),
    Diagnosis("torch", "torch", "the stack's torch cannot run on this GPU (no stack in use, a CPU build, "
              "or no code for the capability)", "use a profile whose torch covers the capability "
              "(profiles/*.yml) and run playbooks/site.yml"),
    Diagnosis("kernel", "kernel", "the sgl_kernel variant the loader picks has no code for this GPU",
              "rebuild the kernel for the capability (sgl_kernel_install: source), run playbooks/site.yml"),
    Diagnosis("environment", "kernel", "a library of the stack has no code for this GPU; it fails only if "
              "the served model loads it", "add its path to verify_env_scan_ignore when the model never "
              "loads it, else install a build of it for this capability"),
    Diagnosis("service", "service", "the model server is down, still loading, or hung after loading",
              "read journalctl -u 'sglang-*' on the host; a hang after loading on a multi-GPU PCIe host is "
              "usually peer-to-peer (see topology); then run the sglang_service restart (readiness gate)"),
    Diagnosis("speculative", "speculative acceptance", "the draft model's tokens are mostly rejected: "
              "a draft trained for another target model or version, other speculative settings (num_steps, "
              "topk, num_draft_tokens), a quantisation mismatch between draft and target, or another chat "
              "template",
              "use the draft made for this target and version, tune --speculative-num-steps / "
              "--speculative-eagle-topk / --speculative-num-draft-tokens, or serve the model without "
              "speculative decoding; the measured acceptance length per model is in the check's figures"),
    Diagnosis("gateway", "gateway", "the gateway (smg) does not answer or routes to no healthy worker",
              "read journalctl -u smg on the gateway host and run playbooks/site.yml on the sglang_gateway "
              "group"),
    Diagnosis("drift", "lock", "the host no longer matches the lock (changed by hand or by another run)",
              "make it match: playbooks/reproduce.yml -e reproduce_lock=<the lock>"),
)
OTHER_STAGE = "other"  # checks the table does not know: after every stage


class ReportError(ValueError):
    """Malformed check results (a bug in the playbook that collected them)."""


def check_order():
    """The known checks in report order: by stage, then in the order of the table."""
    return tuple(d.check for d in sorted(DOCTOR, key=lambda d: STAGES.index(d.stage)))


def _check_key(check, order):
    name = check["check"]
    return (order.index(name),) if name in order else (len(order), name)


def _checked(host, check):
    """A check as the report keeps it: its stage, and for a failure or warning the cause and fix."""
    if not isinstance(check, dict) or check.get("status") not in STATUSES or not check.get("check"):
        raise ReportError(f"host {host}: malformed check {check!r}; each needs check, status "
                          f"({'/'.join(STATUSES)}) and detail")
    known = next((d for d in DOCTOR if d.check == check["check"]), None)
    kept = {"check": check["check"], "status": check["status"], "detail": str(check.get("detail") or ""),
            "stage": known.stage if known else OTHER_STAGE}
    if "figures" in check:
        kept["figures"] = check["figures"]
    if check["status"] in ("fail", "warn"):
        kept["cause"] = str(check.get("cause") or (known.cause if known else "not in the doctor's table"))
        kept["fix"] = str(check.get("fix") or (known.fix if known else "read the detail"))
    return kept


def _sentence(text):
    """``text`` on one line, without its closing full stop (the caller adds one)."""
    return " ".join(line.strip() for line in text.splitlines()).rstrip(".")


def fix_first(host, checks):
    """The line that says what to fix first on ``host`` (checks in report order), or None."""
    first = next((c for c in checks if c["status"] == "fail"), None)
    if first is None:
        return None
    return (f"{host}: fix the {first['stage']} stage first. {first['check']}: {_sentence(first['detail'])}. "
            f"Likely cause: {_sentence(first['cause'])}. Fix: {_sentence(first['fix'])}.")


def summarize(hosts):
    """{"hosts": [{"host", "status", "checks"}...], "status", "counts"} from {host: [check, ...]}."""
    summary, counts, order = [], {"hosts": 0, "passed": 0, "failed": 0}, check_order()
    for host in sorted(hosts):
        checks = sorted((_checked(host, check) for check in hosts[host] or []),
                        key=lambda check: _check_key(check, order))
        failed = any(c["status"] == "fail" for c in checks)
        summary.append({"host": host, "status": "fail" if failed else "ok", "checks": checks,
                        "fix_first": fix_first(host, checks)})
        counts["hosts"] += 1
        counts["failed" if failed else "passed"] += 1
    return {"hosts": summary, "status": "fail" if counts["failed"] else "ok", "counts": counts,
            "fix_first": [h["fix_first"] for h in summary if h["fix_first"]]}


def _cell(text, width):
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def render_table(report, detail_width=90):
    """Fixed-width text table for the terminal; its first lines say what to fix first on each failing
    host."""
    rows = [(h["host"], c["stage"], c["check"], c["status"].upper(), c["detail"])
            for h in report["hosts"] for c in h["checks"]]
    titles = ("host", "stage", "check", "status")
    widths = [max([len(r[i]) for r in rows] + [len(title)]) for i, title in enumerate(titles)]
    lines = [f"FIX FIRST {line}" for line in report["fix_first"]]
    lines += [""] if lines else []
    lines.append("  ".join(f"{title:<{width}}" for title, width in zip(titles, widths)) + "  detail")
    lines.append("-" * (sum(widths) + 2 * len(widths) + min(detail_width, 40)))
    for row in rows:
        lines.append("  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths)) + "  "
                     + _cell(row[-1], detail_width))
    counts = report["counts"]
    lines.append(f"{counts['passed']} of {counts['hosts']} hosts passed"
                 + (f", {counts['failed']} failed" if counts["failed"] else ""))
    return "\n".join(lines)


def _md_cell(text):
    """A detail as one Markdown table cell: no pipe, no line break (a row must stay on one line)."""
    return " ".join(line.strip() for line in text.replace("|", "/").splitlines())


def _doctor_lines(host):
    """Numbered cause and fix of each failure and warning of a host, in the order the chain breaks."""
    lines, first = [], None
    for check in (c for c in host["checks"] if c["status"] in ("fail", "warn")):
        after = (f", after the {first['check']} failure above: re-check once that is fixed"
                 if first and check["status"] == "fail" else "")
        cause, fix = _md_cell(_sentence(check["cause"])), _md_cell(_sentence(check["fix"]))
        lines.append(f"{len(lines) + 1}. **{check['check']}** ({check['stage']} stage, {check['status']}"
                     f"{after}): {cause}. Fix: {fix}.")
        first = first or (check if check["status"] == "fail" else None)
    return lines


def render_markdown(report, title="Fleet verify report", generated=""):
    """A Markdown document: what to fix first on each failing host, a summary line, then per host its
    fix-first line, its checks in chain order, and the cause and fix of each failure and warning."""
    counts = report["counts"]
    lines = [f"# {title}", ""]
    if report["fix_first"]:
        lines += [f"- **Fix first** {_md_cell(line)}" for line in report["fix_first"]] + [""]
    if generated:
        lines += [f"Generated {generated}.", ""]
    lines += [f"**{counts['passed']} of {counts['hosts']} hosts passed.**", ""]
    for host in report["hosts"]:
        lines += [f"## {host['host']}: {host['status'].upper()}", ""]
        if host["fix_first"]:
            lines += [f"**Fix first:** {_md_cell(host['fix_first'])}", ""]
        lines += ["| stage | check | status | detail |", "|---|---|---|---|"]
        lines += [f"| {c['stage']} | {c['check']} | {c['status']} | {_md_cell(c['detail'])} |"
                  for c in host["checks"]]
        lines.append("")
        doctor = _doctor_lines(host)
        if doctor:
            lines += ["Causes and fixes, in the order the chain breaks:", "", *doctor, ""]
    return "\n".join(lines)


def render_json(report, generated=""):
    """The report as indented JSON (with the time it was generated, when given)."""
    return json.dumps(dict(report, generated=generated) if generated else report, indent=1, sort_keys=True)


def _skipped(result):
    return not result or result.get("skipped")


def _failed(result):
    return result.get("failed") and result.get("msg")


def speculative_check(results):
    """The ``speculative`` check from sglang_spec_acceptance's results (sglang_service_spec_acceptance):
    the worst status, each model's measured acceptance length in the detail and in ``figures``."""
    worst = max((r.get("status") or "fail" for r in results), key=("ok", "warn", "fail").index)
    detail = "; ".join(
        f"{r.get('name')}: accept length {r['accept_length']} (min {r.get('min_accept_length')}, draft "
        f"{r.get('draft_model') or '-'})" if r.get("status") == "ok" else str(r.get("msg"))
        for r in results)
    figures = [{"name": r.get("name"), "accept_length": r.get("accept_length"),
                "min_accept_length": r.get("min_accept_length"), "draft_model": r.get("draft_model")}
               for r in results]
    return {"check": "speculative", "status": worst, "detail": detail, "figures": figures}


def health_check(name, results):
    """(status, detail) of the ``service`` or ``gateway`` check from health requests.

    ``results``: one ansible.builtin.uri result, or a list of them or of the sglang_service role's probe
    entries ({name, url, status, msg}; status -1 when nothing answered). Skipped or empty: nothing of the
    kind on this host. Every one must answer 200; the detail names each, the failing first.
    """
    if isinstance(results, dict):
        results = [results]
    asked = [r for r in results or [] if not _skipped(r)]
    if not asked:
        return "skip", f"no {name} on this host"
    failing, answering = [], []
    for result in asked:
        status = result.get("status") or 0  # the uri module says -1 when nothing answered
        label = f"{result['name']}: " if result.get("name") else ""
        url = result.get("url")
        if status == 200:
            answering.append(f"{label}{url} answered 200")
        else:
            failing.append(f"{label}{url} answered {status}" if status > 0
                           else f"{label}{url} did not answer: {result.get('msg')}")
    return ("fail" if failing else "ok"), "; ".join(failing + answering)


def _stack_checks(add, cuda, facts, stack_name, torch):
    """The cuda and torch checks of a host that should have a stack."""
    add("cuda", "ok" if cuda.get("toolkit_version") else "fail",
        f"nvcc {cuda.get('nvcc_version')} (CUDA {cuda.get('toolkit_version')}) at {cuda.get('nvcc')}"
        if cuda.get("toolkit_version") else f"no working nvcc at {cuda.get('nvcc')}" if cuda.get("nvcc")
        else "no CUDA toolkit where the host's cuda_toolchain settings look (no nvcc found)")
    if not stack_name:
        root = (facts.get("stack") or {}).get("root")
        add("torch", "fail", f"no stack in use: {root}/current does not exist",
            "playbooks/site.yml never activated a stack on this host, or its current link was removed")
    elif _skipped(torch):
        add("torch", "skip", "torch was not checked")
    elif _failed(torch) and not torch.get("torch_version"):
        add("torch", "fail", torch["msg"], "torch cannot be imported from the stack (a broken or partial "
            "install)")
    else:
        missing = torch.get("missing") or []
        add("torch", "fail" if missing or torch.get("build") != "cuda" else "ok",
            f"torch {torch.get('torch_version')} ({torch.get('build')}) in {stack_name}: "
            + (f"no code for {', '.join(missing)}" if missing else
               f"covers {', '.join(torch.get('require') or []) or 'no capability asked'}"),
            None if torch.get("build") == "cuda" else f"the stack's torch is a {torch.get('build')} build, "
            "not a CUDA one (the wrong index or CUDA tag in the profile)")


def host_checks(gpu, stack, *, torch=None, kernel=None, scan=None, service=None, gateway=None, drift=None,
                scan_ignore=(), p2p_required=True, speculative=None, stack_expected=True):
    """One host's checks from the registered results of verify.yml's read-only tasks.

    Each argument is a module result (``skipped`` when the task did not run); ``stack`` is stack_facts'.
    ``p2p_required`` makes GPUs that cannot reach each other peer-to-peer a failure (else a warning).
    ``stack_expected`` false (a gateway-only host, which site.yml gives no CUDA stack) makes a missing
    toolkit and stack a skip, not a failure; a stack that is there anyway is checked as on any host.
    """
    checks = []

    def add(check, status, detail, cause=None, fix=None):
        checks.append(dict({"check": check, "status": status, "detail": detail},
                           **({"cause": cause} if cause else {}), **({"fix": fix} if fix else {})))

    if gpu.get("present"):
        names = sorted({g["name"] for g in gpu.get("gpus") or []})
        add("gpu", "ok", f"{len(gpu['gpus'])} x {', '.join(names)}, capability "
                         f"{', '.join(gpu.get('capabilities') or [])}")
        add("driver", "fail" if gpu.get("reload_required") else "ok",
            gpu.get("reload_reason") if gpu.get("reload_required")
            else f"{gpu.get('driver_version')} (CUDA {gpu.get('cuda_driver_version')})")
    elif gpu.get("nvidia_smi"):
        # nvidia-smi is installed but sees no GPU: a GPU host whose driver is not loaded, hung or mismatched
        reload = next(d for d in DOCTOR if d.check == "driver") if gpu.get("reload_required") else None
        add("gpu", "fail", f"{gpu['nvidia_smi']} sees no usable GPU: {gpu.get('reason')}",
            reload and reload.cause, reload and reload.fix)
        add("driver", "fail" if reload else "skip",
            gpu.get("reload_reason") if reload else "no driver to check")
    else:
        add("gpu", "skip", f"no usable GPU ({gpu.get('reason')}); checks use the stack's targets")
        add("driver", "skip", "no driver to check")
    add("topology", *topology_check(gpu, p2p_required))
    facts = stack.get("facts") or {}
    cuda = facts.get("cuda") or {}
    stack_name = (facts.get("stack") or {}).get("name")
    if not stack_expected and not stack_name:
        for check in ("cuda", "torch"):
            add(check, "skip", "a gateway-only host: site.yml gives it no CUDA stack")
    else:
        _stack_checks(add, cuda, facts, stack_name, torch)
    if _skipped(kernel):
        add("kernel", "skip", "no stack in use" if not stack_name else "kernel not checked")
    elif _failed(kernel) and not kernel.get("variants"):
        add("kernel", "fail", kernel["msg"])
    elif kernel.get("selected_covers") is False:
        add("kernel", "fail", kernel.get("message") or f"{kernel.get('selected_path')} has no code here")
    else:
        covers = (f"covers {kernel.get('capability')}" if kernel.get("selected_covers")
                  else "no capability to rate it on")
        add("kernel", "ok", f"{kernel.get('package_version')}: loader picks {kernel.get('selected_variant')} "
                            f"({covers})")
    if _skipped(scan):
        add("environment", "skip", "no stack or no capability to scan for")
    elif _failed(scan) and "missing" not in scan:
        add("environment", "fail", scan["msg"])
    else:
        bad = sorted({path for paths in (scan.get("missing") or {}).values() for path in paths
                      if not any(part in path for part in scan_ignore)})
        with_code = (scan.get("counts") or {}).get("with_device_code", 0)
        # torch and the kernel have checks of their own that fail; the rest of the environment (deep_ep,
        # flash_mla, nccl plugins ...) often carries code for some GPUs only and is loaded only by the
        # features that need it: reported, so a person can judge, but not failing the host
        add("environment", "warn" if bad else "ok",
            f"{len(bad)} of {with_code} CUDA binaries cannot run here: {', '.join(bad[:5])}"
            + (f" and {len(bad) - 5} more" if len(bad) > 5 else "") if bad
            else f"all {with_code} CUDA binaries run here")
    for name, result in (("service", service), ("gateway", gateway)):
        add(name, *health_check(name, result))
    if speculative:  # only hosts with a model that drafts have the check
        checks.append(speculative_check(speculative))
    if _skipped(drift):
        add("drift", "skip", "no lock given (-e verify_lock_file=locks/NAME.lock.yml)")
    elif _failed(drift) and "drift" not in drift:
        add("drift", "fail", drift["msg"])
    else:
        items = drift.get("drift") or []
        add("drift", "fail" if items else "ok",
            "; ".join(d["message"] for d in items) if items else "matches the lock")
    return checks

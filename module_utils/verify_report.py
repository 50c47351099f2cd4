"""The verify job's report: per host, one line per check, rendered as a terminal table, Markdown and JSON.

Each host contributes a list of checks ``{"check", "status", "detail"}`` where status is ``ok``,
``warn`` (reported, not failing: e.g. a library of the environment without code for this GPU that the
served model may never load), ``fail`` or ``skip`` (a check that cannot apply, e.g. the import test on
a GPU-less host: said, never hidden). A host passes when none of its checks failed; the fleet passes
when every host does.

Stdlib only, Python 3.8+.
"""

import json

STATUSES = ("ok", "warn", "fail", "skip")
# The order checks appear in, whatever order they arrive in; unknown checks follow, sorted.
CHECK_ORDER = ("gpu", "driver", "cuda", "torch", "kernel", "environment", "service", "speculative", "gateway",
               "drift")


class ReportError(ValueError):
    """Malformed check results (a bug in the playbook that collected them)."""


def _check_key(check):
    name = check["check"]
    return (CHECK_ORDER.index(name), "") if name in CHECK_ORDER else (len(CHECK_ORDER), name)


def summarize(hosts):
    """{"hosts": [{"host", "status", "checks"}...], "status", "counts"} from {host: [check, ...]}."""
    summary, counts = [], {"hosts": 0, "passed": 0, "failed": 0}
    for host in sorted(hosts):
        checks = []
        for check in hosts[host] or []:
            if not isinstance(check, dict) or check.get("status") not in STATUSES or not check.get("check"):
                raise ReportError(f"host {host}: malformed check {check!r}; each needs check, status "
                                  f"({'/'.join(STATUSES)}) and detail")
            checks.append({"check": check["check"], "status": check["status"],
                           "detail": str(check.get("detail") or ""),
                           **({"figures": check["figures"]} if "figures" in check else {})})
        checks.sort(key=_check_key)
        failed = any(c["status"] == "fail" for c in checks)
        summary.append({"host": host, "status": "fail" if failed else "ok", "checks": checks})
        counts["hosts"] += 1
        counts["failed" if failed else "passed"] += 1
    return {"hosts": summary, "status": "fail" if counts["failed"] else "ok", "counts": counts}


def _cell(text, width):
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def render_table(report, detail_width=90):
    """Fixed-width text table for the terminal."""
    rows = [(h["host"], c["check"], c["status"].upper(), c["detail"])
            for h in report["hosts"] for c in h["checks"]]
    widths = [max([len(r[i]) for r in rows] + [len(title)])
              for i, title in enumerate(("host", "check", "status"))]
    lines = [f"{'host':<{widths[0]}}  {'check':<{widths[1]}}  {'status':<{widths[2]}}  detail"]
    lines.append("-" * (sum(widths) + 6 + min(detail_width, 40)))
    for host, check, status, detail in rows:
        lines.append(f"{host:<{widths[0]}}  {check:<{widths[1]}}  {status:<{widths[2]}}  "
                     f"{_cell(detail, detail_width)}")
    counts = report["counts"]
    lines.append(f"{counts['passed']} of {counts['hosts']} hosts passed"
                 + (f", {counts['failed']} failed" if counts["failed"] else ""))
    return "\n".join(lines)


def _md_cell(text):
    """A detail as one Markdown table cell: no pipe, no line break (a row must stay on one line)."""
    return " ".join(line.strip() for line in text.replace("|", "/").splitlines())


def render_markdown(report, title="Fleet verify report", generated=""):
    """A Markdown document: a summary line, then one table per host."""
    counts = report["counts"]
    lines = [f"# {title}", ""]
    if generated:
        lines += [f"Generated {generated}.", ""]
    lines += [f"**{counts['passed']} of {counts['hosts']} hosts passed.**", ""]
    for host in report["hosts"]:
        lines += [f"## {host['host']}: {host['status'].upper()}", "", "| check | status | detail |",
                  "|---|---|---|"]
        lines += [f"| {c['check']} | {c['status']} | {_md_cell(c['detail'])} |"
                  for c in host["checks"]]
        lines.append("")
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


def host_checks(gpu, stack, *, torch=None, kernel=None, scan=None, service=None, gateway=None, drift=None,
                scan_ignore=(), speculative=None):
    """One host's checks from the registered results of verify.yml's read-only tasks.

    Each argument is a module result (``skipped`` when the task did not run); ``stack`` is stack_facts'.
    """
    checks = []

    def add(check, status, detail):
        checks.append({"check": check, "status": status, "detail": detail})

    if gpu.get("present"):
        names = sorted({g["name"] for g in gpu.get("gpus") or []})
        add("gpu", "ok", f"{len(gpu['gpus'])} x {', '.join(names)}, capability "
                         f"{', '.join(gpu.get('capabilities') or [])}")
        add("driver", "fail" if gpu.get("reload_required") else "ok",
            gpu.get("reload_reason") if gpu.get("reload_required")
            else f"{gpu.get('driver_version')} (CUDA {gpu.get('cuda_driver_version')})")
    else:
        add("gpu", "skip", f"no usable GPU ({gpu.get('reason')}); checks use the stack's targets")
        add("driver", "skip", "no driver to check")
    facts = stack.get("facts") or {}
    cuda = facts.get("cuda") or {}
    add("cuda", "ok" if cuda.get("toolkit_version") else "fail",
        f"nvcc {cuda.get('nvcc_version')} (CUDA {cuda.get('toolkit_version')}) at {cuda.get('nvcc')}"
        if cuda.get("toolkit_version") else f"no working nvcc at {cuda.get('nvcc')}")
    stack_name = (facts.get("stack") or {}).get("name")
    if not stack_name:
        root = (facts.get("stack") or {}).get("root")
        add("torch", "fail", f"no stack in use: {root}/current does not exist")
    elif _skipped(torch):
        add("torch", "skip", "torch was not checked")
    elif _failed(torch) and not torch.get("torch_version"):
        add("torch", "fail", torch["msg"])
    else:
        missing = torch.get("missing") or []
        add("torch", "fail" if missing or torch.get("build") != "cuda" else "ok",
            f"torch {torch.get('torch_version')} ({torch.get('build')}) in {stack_name}: "
            + (f"no code for {', '.join(missing)}" if missing else
               f"covers {', '.join(torch.get('require') or []) or 'no capability asked'}"))
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
        if _skipped(result):
            add(name, "skip", f"no {name} on this host")
        else:
            status = result.get("status") or 0  # the uri module says -1 when nothing answered
            add(name, "ok" if status == 200 else "fail",
                f"{result.get('url')} answered {status}" if status > 0 else
                f"{result.get('url')} did not answer: {result.get('msg')}")
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

"""The verify job's report: per host, one line per check, rendered as a terminal table, Markdown and JSON.

Each host contributes a list of checks ``{"check", "status", "detail"}`` where status is ``ok``,
``fail`` or ``skip`` (a check that cannot apply, e.g. the import test on a GPU-less host: said, never
hidden). A host passes when none of its checks failed; the fleet passes when every host does.

Stdlib only, Python 3.8+.
"""

import json

STATUSES = ("ok", "fail", "skip")
# The order checks appear in, whatever order they arrive in; unknown checks follow, sorted.
CHECK_ORDER = ("gpu", "driver", "cuda", "torch", "kernel", "environment", "service", "gateway", "drift")


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
                           "detail": str(check.get("detail") or "")})
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
        lines += [f"| {c['check']} | {c['status']} | {c['detail'].replace('|', '/')} |"
                  for c in host["checks"]]
        lines.append("")
    return "\n".join(lines)


def render_json(report, generated=""):
    """The report as indented JSON (with the time it was generated, when given)."""
    return json.dumps(dict(report, generated=generated) if generated else report, indent=1, sort_keys=True)

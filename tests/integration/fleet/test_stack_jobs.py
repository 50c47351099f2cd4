"""The verify and snapshot jobs on the session stack (fleet_stack): a lock taken from a host shows no
drift on it, a package changed by hand shows up as drift naming it, and verify in check mode changes
nothing on any host.

Named to sort after test_stack.py: the kernel and service tests point the session hosts' `current` at
stand-in stacks of their own, and fleet_stack must be made (site.yml run) after them.
"""

from __future__ import annotations

import json

import pytest
import yaml
from ansible_run import REPO_ROOT
from cache import pip_download

pytestmark = pytest.mark.integration

SNAPSHOT = REPO_ROOT / "playbooks" / "snapshot.yml"
VERIFY = REPO_ROOT / "playbooks" / "verify.yml"
# A version of a small torch dependency that the stack does not hold: the "change by hand"
OTHER_FILELOCK = "filelock==3.20.0"


@pytest.fixture(scope="module")
def lock(fleet_stack, tmp_path_factory):
    """snapshot.yml on the first host, into a directory of this test's own."""
    locks = tmp_path_factory.mktemp("locks")
    host = fleet_stack.hosts[0]
    result = fleet_stack.run(playbook=SNAPSHOT, snapshot_host=host, snapshot_name="jobs",
                             snapshot_locks_dir=str(locks))
    assert result.rc == 0, result.stdout[-4000:]
    return host, locks / "jobs.lock.yml"


def verify(fleet_stack, tmp_path, lock_file=None, **kwargs):
    extra = {"verify_reports_dir": str(tmp_path), "verify_fail": False}
    if lock_file:
        extra["verify_lock_file"] = str(lock_file)
    result = fleet_stack.run(playbook=VERIFY, **extra, **kwargs)
    assert result.rc == 0, result.stdout[-4000:]
    report = json.loads((tmp_path / "verify.json").read_text())
    assert (tmp_path / "verify.md").read_text().startswith("# Fleet verify report")
    return result, {h["host"]: {c["check"]: c for c in h["checks"]} for h in report["hosts"]}


def test_the_lock_records_what_the_host_runs(fleet_stack, lock):
    host, path = lock
    data = yaml.safe_load(path.read_text())
    assert data["name"] == "jobs"
    assert data["captured_from"] == host
    assert data["stack"]["name"] == fleet_stack.stack_names[host]
    assert data["target_capabilities"] == ["12.0"]
    assert data["torch"]["version"] == "2.14.1"
    assert data["torch"]["cuda_version"] == "13.0"
    assert data["torch"]["git_version"]
    assert len(data["torch"]["wheel_sha256"]) == 1
    assert data["sgl_kernel"]["version"] == "0.4.10"
    assert data["sgl_kernel"]["build_fingerprint"].startswith("wheel-")
    assert data["cuda"]["toolkit_version"] == "13.0"
    names = {d["name"]: d for d in data["distributions"]}
    assert {"torch", "sglang-kernel", "filelock"} <= set(names)
    # the seeded wheel cache holds every wheel the stack came from
    assert all(d["wheels"] for d in data["distributions"]), [n for n, d in names.items() if not d["wheels"]]


def test_verify_with_the_lock_shows_no_drift_then_a_hand_change(fleet, fleet_stack, lock, tmp_path):
    host, path = lock
    _result, checks = verify(fleet_stack, tmp_path, path, limit=host)
    assert checks[host]["drift"]["status"] == "ok", checks[host]["drift"]
    for name in ("torch", "kernel", "cuda"):
        assert checks[host][name]["status"] == "ok", checks[host][name]
    assert checks[host]["gpu"]["status"] == "skip"
    pip_download([OTHER_FILELOCK])
    uv = f"/opt/sglang/tools/uv-0.13.8/bin/uv pip install --python {fleet_stack.root}/current/bin/python " \
         f"--no-index --find-links {fleet.wheelhouse_url}"
    locked = next(d["version"] for d in yaml.safe_load(path.read_text())["distributions"]
                  if d["name"] == "filelock")
    try:
        fleet.ssh(host, f"{uv} {OTHER_FILELOCK}")
        _result, checks = verify(fleet_stack, tmp_path, path, limit=host)
        drift = checks[host]["drift"]
        assert drift["status"] == "fail"
        assert drift["detail"] == f"filelock is {OTHER_FILELOCK.split('==')[1]}, the lock has {locked}"
    finally:
        fleet.ssh(host, f"{uv} filelock=={locked}")


def test_verify_in_check_mode_changes_nothing_on_the_hosts(fleet, fleet_stack, tmp_path):
    marker = "/run/verify-check-mode-marker"
    for host in fleet_stack.hosts:
        fleet.ssh(host, f"touch {marker}; sleep 1")
    result, checks = verify(fleet_stack, tmp_path, check=True)
    assert sorted(checks) == sorted(fleet_stack.hosts)
    # the only change is the report, written on the controller
    changed = {(h, r["task"]) for h, results in result.results.items() for r in results if r.get("changed")}
    assert {task for _h, task in changed} <= {"Summarise every host's checks and write the reports"}, changed
    for host in fleet_stack.hosts:
        find = (f"find /opt/sglang /etc /var/cache/sglang /root -xdev -newer {marker} "
                "-not -path '/root/.ansible*' -not -path '/root/.cache*' -print")
        newer = fleet.ssh(host, find).stdout.split()
        assert newer == [], f"{host}: verify --check changed {newer}"

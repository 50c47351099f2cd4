"""The verify, snapshot and reproduce jobs on the session stack (fleet_stack): a lock taken from a host
shows no drift on it, a package changed by hand shows up as drift naming it, and verify in check mode
changes nothing on any host. reproduce.yml puts host 1's lock onto host 3 (its stacks removed first: a
whole stack to install), after which verify shows no drift on either; a lock
whose wheel is gone fails before any host changes, naming it; check mode and a second run change nothing;
a package changed by hand on host 3 is named as drift and reproduce puts it back.

Named to sort after test_stack.py: the kernel and service tests point the session hosts' `current` at
stand-in stacks of their own, and fleet_stack must be made (site.yml run) after them.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from ansible.module_utils.pylock import read_lock, wheel_urls
from ansible_run import REPO_ROOT
from cache import pip_download
from pins import UV_BIN
from stackrun import SEEDED_UV_CACHE

pytestmark = pytest.mark.integration

SNAPSHOT = REPO_ROOT / "playbooks" / "snapshot.yml"
VERIFY = REPO_ROOT / "playbooks" / "verify.yml"
REPRODUCE = REPO_ROOT / "playbooks" / "reproduce.yml"
# A version of a small torch dependency that the stack does not hold: the "change by hand"
OTHER_FILELOCK = "filelock==3.20.0"
# The session hosts carry different sglang_service test units (host 3 none): the lock and drift hash a unit
# that is the same on every host instead (the default is /etc/systemd/system/sglang-*.service).
UNITS = ["/lib/systemd/system/ssh.service"]


@pytest.fixture(scope="module")
def lock(fleet_stack, tmp_path_factory):
    """snapshot.yml on the first host, into a directory of this test's own."""
    locks = tmp_path_factory.mktemp("locks")
    host = fleet_stack.hosts[0]
    result = fleet_stack.run(playbook=SNAPSHOT, snapshot_host=host, snapshot_name="jobs",
                             stack_snapshot_unit_paths=UNITS, stack_snapshot_locks_dir=str(locks))
    assert result.rc == 0, result.stdout[-4000:]
    return host, locks / "jobs.lock.yml"


def verify(fleet_stack, tmp_path, lock_file=None, **kwargs):
    extra = {"verify_reports_dir": str(tmp_path), "verify_fail": False, "verify_unit_paths": UNITS}
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


def test_the_snapshot_is_also_a_pep_751_lock_of_the_same_wheels(lock):
    _host, path = lock
    data = yaml.safe_load(path.read_text())
    pylock, _digest = read_lock(str(path.parent / "pylock.jobs.toml"))
    assert pylock["lock-version"] == "1.0"
    assert pylock["requires-python"] == "==3.11.*"
    wheels = {(p["name"], p["version"]): {(w["name"], w["hashes"]["sha256"]) for w in p["wheels"]}
              for p in pylock["packages"]}
    assert wheels == {(d["name"], d["version"]): {(w["file"], w["sha256"]) for w in d["wheels"]}
                      for d in data["distributions"]}
    # a wheel the profile's lock (profiles/pylock.stable.toml) names gets its URL, any other a path
    # beside the lock (it is in the controller's wheel cache)
    urls = wheel_urls(read_lock(str(REPO_ROOT / "profiles" / "pylock.stable.toml"))[0])
    for package in pylock["packages"]:
        for wheel in package["wheels"]:
            assert wheel.get("url") == urls.get(wheel["name"]), wheel
            assert ("path" in wheel) == (wheel["name"] not in urls), wheel


def test_verify_with_the_lock_shows_no_drift_then_a_hand_change(fleet, fleet_stack, lock, tmp_path):
    host, path = lock
    _result, checks = verify(fleet_stack, tmp_path, path, limit=host)
    assert checks[host]["drift"]["status"] == "ok", checks[host]["drift"]
    for name in ("torch", "kernel", "cuda"):
        assert checks[host][name]["status"] == "ok", checks[host][name]
    assert checks[host]["gpu"]["status"] == "skip"
    pip_download([OTHER_FILELOCK])
    uv = f"{UV_BIN} pip install --python {fleet_stack.root}/current/bin/python " \
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
        # the session hosts' uv cache is SEEDED_UV_CACHE: /var/cache/sglang does not exist there
        find = (f"find /opt/sglang /etc {SEEDED_UV_CACHE} /root -xdev -newer {marker} "
                "-not -path '/root/.ansible*' -not -path '/root/.cache*' -print")
        newer = fleet.ssh(host, find).stdout.split()
        assert newer == [], f"{host}: verify --check changed {newer}"


# ---- reproduce.yml: host 1's lock onto host 3 ----

def reproduce(fleet_stack, lock_file, hosts, **kwargs):
    return fleet_stack.run(playbook=REPRODUCE, reproduce_lock=str(lock_file), reproduce_hosts=",".join(hosts),
                           stack_reproduce_unit_paths=UNITS, **kwargs)


def mark(fleet, hosts, marker="/run/reproduce-marker"):
    for host in hosts:
        fleet.ssh(host, f"touch {marker}; sleep 1")
    return marker


def newer_than(fleet, host, marker):
    """Paths a play may have written on the host since ``marker`` (its own ssh and ansible dirs aside)."""
    find = (f"find /opt/sglang /etc /var/cache/sglang /var/tmp /root -xdev -newer {marker} "
            "-not -path '/root/.ansible*' -not -path '/root/.cache*' -print 2>/dev/null || true")
    return fleet.ssh(host, find).stdout.split()


def changed_tasks(result, host):
    return [r["task"] for r in result.results.get(host, []) if r.get("changed")]


def test_a_lock_whose_wheel_is_gone_fails_before_any_host_changes(fleet, fleet_stack, lock, tmp_path):
    _host, path = lock
    data = yaml.safe_load(path.read_text())
    filelock = next(d for d in data["distributions"] if d["name"] == "filelock")
    gone = f"filelock-{filelock['version']}.post999-py3-none-any.whl"
    filelock["wheels"] = [dict(filelock["wheels"][0], file=gone)]
    bad = tmp_path / "gone.lock.yml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    hosts = fleet_stack.hosts[1:]
    before = {h: (fleet_stack.current(h), fleet_stack.stacks(h)) for h in hosts}
    marker = mark(fleet, hosts)
    result = reproduce(fleet_stack, bad, hosts)
    assert result.rc != 0
    assert f"filelock=={filelock['version']}: {gone} is no longer in the wheel cache" in result.stdout
    for host in hosts:
        assert (fleet_stack.current(host), fleet_stack.stacks(host)) == before[host]
        assert newer_than(fleet, host, marker) == [], host
        assert changed_tasks(result, host) == []


def test_reproduce_in_check_mode_changes_nothing(fleet, fleet_stack, lock):
    _host, path = lock
    host = fleet_stack.hosts[2]
    before = (fleet_stack.current(host), fleet_stack.stacks(host))
    marker = mark(fleet, [host])
    result = reproduce(fleet_stack, path, [host], check=True)
    assert result.rc == 0, result.stdout[-4000:]
    # it says what it would do, and does nothing
    assert changed_tasks(result, host) == ["Say what a real run would do"]
    assert (fleet_stack.current(host), fleet_stack.stacks(host)) == before
    assert newer_than(fleet, host, marker) == []


@pytest.fixture(scope="module")
def reproduced(fleet, fleet_stack, lock):
    """reproduce.yml of host 1's lock onto host 3, timed, after host 3's stacks and its uv cache are
    removed ("no stack at all": a whole CUDA torch stack to install). The uv cache goes too: it holds the
    old stack's files (the stack's are hardlinks to them), and reproduce installs from other sources
    (the copied wheels), so uv would unpack a second copy beside them: with it kept, this host held the
    old files, the copied wheels and the new copy at the peak (~18 GB), and a CI machine ran out of
    disk here. Host 3 stays on the
    reproduced stack: nothing after this module uses fleet_stack's stack there."""
    source, path = lock
    host = fleet_stack.hosts[2]
    locked = yaml.safe_load(path.read_text())["stack"]["name"]
    fleet.ssh(host, f"rm -rf {fleet_stack.root}/* /var/cache/sglang")
    assert fleet_stack.current(host) == ""
    assert fleet_stack.stacks(host) == []
    started = time.monotonic()
    first = reproduce(fleet_stack, path, [host])
    seconds = time.monotonic() - started
    assert first.rc == 0, first.stdout[-6000:]
    return {"host": host, "source": source, "path": path, "stack": locked, "first": first, "seconds": seconds}


def test_reproduce_installs_the_locks_stack_on_a_host_without_one(fleet_stack, reproduced):
    host = reproduced["host"]
    print(f"reproduce.yml onto {host}: {reproduced['seconds']:.1f} s")
    assert fleet_stack.current(host) == reproduced["stack"]
    assert fleet_stack.stacks(host) == [reproduced["stack"]]
    changed = changed_tasks(reproduced["first"], host)
    assert "Sync the environment to the lock (hash-checked, no index)" in changed
    assert "Point current at the stack" in changed
    # nothing left in the staging directory
    assert fleet_stack.fleet.ssh(host, "test -e /var/tmp/sglang-reproduce", check=False).returncode != 0


def test_after_reproduce_verify_shows_no_drift_on_either_host(fleet_stack, reproduced, tmp_path):
    hosts = [reproduced["source"], reproduced["host"]]
    _result, checks = verify(fleet_stack, tmp_path, reproduced["path"], limit=",".join(hosts))
    for host in hosts:
        assert checks[host]["drift"]["status"] == "ok", (host, checks[host]["drift"])


def test_a_second_reproduce_changes_nothing(fleet_stack, reproduced):
    host = reproduced["host"]
    result = reproduce(fleet_stack, reproduced["path"], [host])
    assert result.rc == 0, result.stdout[-4000:]
    assert result.stats["changed"].get(host, 0) == 0, changed_tasks(result, host)


COPY_WHEELS = "Copy the lock's other wheels from the controller (only the drifted ones, mending in place)"
FETCH_WHEELS = "Fetch the lock's other wheels from the stack's package sources (those they hold)"


def test_a_hand_change_on_the_reproduced_host_is_drift_and_reproduce_puts_it_back(fleet, fleet_stack,
                                                                                  reproduced, tmp_path):
    """Two hand changes in the stack in use: filelock replaced by another version, and typing-extensions'
    RECORD changed (as a reinstall of the same version from other files leaves it, which `uv pip sync`
    alone keeps). reproduce mends the stack in place: it takes the two drifted distributions' wheels only
    (not the lock's whole 5 GB), fetched by the host from the fleet's wheelhouse (the stack's package
    source, which holds both: nothing crosses from the controller), and reinstalls both; verify then
    finds no drift."""
    host = reproduced["host"]
    distributions = yaml.safe_load(reproduced["path"].read_text())["distributions"]
    locked = {d["name"]: d["version"] for d in distributions}
    pip_download([OTHER_FILELOCK])
    site = f"{fleet_stack.root}/current/lib/python3.11/site-packages"
    fleet.ssh(host, f"{UV_BIN} pip install --python "
                    f"{fleet_stack.root}/current/bin/python --no-index --find-links {fleet.wheelhouse_url} "
                    f"{OTHER_FILELOCK} && echo 'typing_extensions_by_hand.py,,' "
                    f">> {site}/typing_extensions-{locked['typing-extensions']}.dist-info/RECORD")
    _result, checks = verify(fleet_stack, tmp_path, reproduced["path"], limit=host)
    drift = checks[host]["drift"]
    assert drift["status"] == "fail"
    assert drift["detail"] == (
        f"filelock is {OTHER_FILELOCK.split('==')[1]}, the lock has {locked['filelock']}; "
        f"typing-extensions {locked['typing-extensions']} was reinstalled from other files (its RECORD "
        "differs from the lock's)")
    result = reproduce(fleet_stack, reproduced["path"], [host])
    assert result.rc == 0, result.stdout[-4000:]
    wheels = {w["file"]: d["name"] for d in distributions for w in d["wheels"]}
    fetched = sorted(wheels[name] for name in result.task(host, FETCH_WHEELS)["fetched"])
    assert fetched == ["filelock", "typing-extensions"], fetched
    assert result.task(host, COPY_WHEELS)["event"] == "runner_on_skipped"  # no wheel left to copy
    assert fleet_stack.current(host) == reproduced["stack"]
    _result, checks = verify(fleet_stack, tmp_path, reproduced["path"], limit=host)
    assert checks[host]["drift"]["status"] == "ok", checks[host]["drift"]


def test_reproduce_without_a_lock_says_what_to_give(fleet_stack):
    result = fleet_stack.run(playbook=REPRODUCE, reproduce_hosts=fleet_stack.hosts[2])
    assert result.rc != 0
    assert "give the lock to reproduce: -e reproduce_lock=locks/NAME.lock.yml" in result.stdout

#!/usr/bin/python
"""Ansible module: build, check and compare stack lock files (see module_utils/stack_lock.py)."""

DOCUMENTATION = r"""
---
module: stack_lock
short_description: Build a stack lock, compare a host against one, or check that its wheels can be had
description:
  - A lock (C(locks/<name>.lock.yml)) records what a working host runs, down to the sha256 of every wheel
    it was installed from. C(playbooks/snapshot.yml) writes one, C(playbooks/reproduce.yml) installs a host
    to match one, C(playbooks/verify.yml) reports drift from one.
  - O(action=build) returns a lock built from O(facts) (collected on a host) and the wheel store listing.
  - O(action=compare) validates O(lock) and returns the drift between it and O(facts), and what
    playbooks/reproduce.yml reinstalls to put it back (RV(repair)).
  - O(action=check_wheels) validates O(lock) and lists the distributions whose wheels are missing from
    O(wheel_store) (the kernel's from O(kernel_store)) or differ from the recorded sha256; with
    O(fail_on_missing) it fails naming them. It returns the controller path of every usable wheel.
  - Never changes anything (the playbook writes the lock file).
version_added: "0.2.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  action:
    description: What to do.
    type: str
    choices: [build, compare, check_wheels]
    required: true
  name:
    description: Name of the lock to build (O(action=build)).
    type: str
  facts:
    description:
      - Facts of one host in the shape of a lock (C(profile), C(stack), C(target_capabilities), C(cuda),
        C(driver), C(torch), C(sgl_kernel), C(sglang), C(unit), C(captured_from), C(captured_at)) plus
        C(distributions) as the python_distributions module returns them.
      - Required for O(action=build) and O(action=compare).
    type: dict
  lock:
    description: A lock read from disk (O(action=compare), O(action=check_wheels)).
    type: dict
  wheel_store:
    description:
      - Directory holding the cached wheels (the stack wheel cache). Its C(*.whl) files are hashed with
        sha256 (only those the facts or the lock name). Required for O(action=build) and
        O(action=check_wheels).
    type: path
  kernel_store:
    description:
      - The sgl_kernel artifact store (C(sgl_kernel_artifact_dir), holding C(<build fingerprint>/<wheel>)).
        When given, the kernel's wheel is looked up in C(<kernel_store>/<build fingerprint>/) only, never
        in O(wheel_store), since a source build has the released version number but other content.
      - Used by O(action=build) and O(action=check_wheels).
    type: path
  fail_on_missing:
    description: With O(action=check_wheels), fail when any wheel is missing or differs.
    type: bool
    default: true
  profile_lock:
    description:
      - With O(action=build), the profile's PEP 751 lock on the controller, whose URLs the returned C(pylock)
        gives each wheel it names.
    type: path
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: Build the lock from a host's facts
  stack_lock:
    action: build
    name: prod-2026-12
    facts: "{{ snapshot_facts }}"
    wheel_store: /srv/sglang-wheels
  delegate_to: localhost
  register: built

- name: Refuse a lock whose wheels are gone before anything changes
  stack_lock:
    action: check_wheels
    lock: "{{ lookup('ansible.builtin.file', 'locks/prod-2026-12.lock.yml') | from_yaml }}"
    wheel_store: /srv/sglang-wheels
  delegate_to: localhost
"""

RETURN = r"""
lock:
  description: The lock built (O(action=build)).
  returned: when action is build
  type: dict
drift:
  description: Differences between O(lock) and O(facts), tracked facts first, then distributions.
  returned: when action is compare
  type: list
  elements: dict
  contains:
    item:
      description: What differs (C(torch.version), C(distribution six), ...).
      type: str
    locked:
      description: The value in the lock.
      type: raw
    found:
      description: The value on the host.
      type: raw
    scope:
      description:
        - C(stack) for what playbooks/reproduce.yml installs away, C(host) for the toolkit, driver and unit.
      type: str
    message:
      description: The difference in words.
      type: str
repair:
  description: What playbooks/reproduce.yml reinstalls to put the host back onto O(lock).
  returned: when action is compare
  type: dict
  contains:
    reinstall:
      description:
        - The locked distributions that differ - not installed, another version, or the same version
          from other files (which C(uv pip sync) alone keeps).
      type: list
      elements: str
    in_place:
      description:
        - Whether the stack in use is the lock's own (the same name) and all of its drift is in its
          distributions, so the wheels of RV(repair.reinstall) are the only ones the install needs.
      type: bool
pylock:
  description:
    - The same lock as PEP 751 text (C(pylock.<name>.toml)) - every distribution with a kept wheel, each wheel
      with its sha256 and the URL the profile's lock (O(profile_lock)) names for it, else a path beside the
      lock; C(uv pip sync) installs it without this project.
  returned: when action is build
  type: str
missing:
  description: One message per distribution that cannot be reinstalled from O(wheel_store).
  returned: when action is check_wheels
  type: list
  elements: str
requirements:
  description: Requirement lines with the locked hashes, for C(uv pip sync --require-hashes).
  returned: when action is check_wheels
  type: str
wheels:
  description: Every wheel of the lock present with its recorded sha256 (a distribution may have several).
  returned: when action is check_wheels
  type: list
  elements: dict
  contains:
    name:
      description: Canonical distribution name.
      type: str
    version:
      description: Its version.
      type: str
    file:
      description: Wheel file name.
      type: str
    filename:
      description: The same file name, under the key the stack_fetch_wheels module reads.
      type: str
    sha256:
      description: The wheel's sha256, as the lock records it.
      type: str
    path:
      description: Where the wheel is on the controller.
      type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pylock import LockError as PylockError
from ansible.module_utils.pylock import read_lock, render_lock, wheel_urls
from ansible.module_utils.stack_lock import (
    LockError,
    build_lock,
    drift,
    hashed_requirements,
    repair,
    store_listing,
    validate_lock,
    wanted_by_facts,
    wanted_by_lock,
    wheel_sources,
)

REQUIRED = {"build": ("name", "facts", "wheel_store"), "compare": ("lock", "facts"),
            "check_wheels": ("lock", "wheel_store")}


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": list(REQUIRED), "required": True},
            "name": {"type": "str"},
            "facts": {"type": "dict"},
            "lock": {"type": "dict"},
            "wheel_store": {"type": "path"},
            "kernel_store": {"type": "path"},
            "fail_on_missing": {"type": "bool", "default": True},
            "profile_lock": {"type": "path"},
        },
        required_if=[("action", action, list(names)) for action, names in REQUIRED.items()],
        supports_check_mode=True,
    )
    try:
        run(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"stack_lock failed unexpectedly: {type(exc).__name__}: {exc}")


def _listing(module, directory, wanted, what):
    try:
        return store_listing(directory, lambda path: module.digest_from_file(path, "sha256"), wanted)
    except OSError as exc:
        module.fail_json(msg=f"cannot read the {what} {directory}: {exc.strerror}; point {what} at the "
                             + ("stack wheel cache directory" if what == "wheel_store" else
                                "sgl_kernel artifact store (sgl_kernel_artifact_dir)"))


def _kernel_dir(module, fingerprint):
    """The artifact store's directory of one kernel build, or None when no kernel store or build is known."""
    if not module.params["kernel_store"] or not fingerprint:
        return None
    return os.path.join(module.params["kernel_store"], fingerprint)


def _kernel_listing(module, fingerprint, wanted):
    """{file: sha256} of the kernel build's directory ({} when it is gone), None without a kernel store."""
    directory = _kernel_dir(module, fingerprint)
    if directory is None:
        return None
    if not os.path.isdir(directory):
        return {}
    return _listing(module, directory, wanted, "kernel_store")


def _pylock(module, lock):
    """The lock as PEP 751 text: the wheels' URLs from the profile's lock where it names them."""
    urls = {}
    if module.params["profile_lock"] and os.path.exists(module.params["profile_lock"]):
        try:
            urls = wheel_urls(read_lock(module.params["profile_lock"])[0])
        except PylockError as exc:
            module.fail_json(msg=str(exc))
    python = ((lock.get("stack") or {}).get("python") or "").split(".")
    requires = f"=={python[0]}.{python[1]}.*" if len(python) >= 2 else None
    header = [f"{lock['name']}: what {lock.get('captured_from')} ran at {lock.get('captured_at')} "
              f"(stack {(lock.get('stack') or {}).get('name')}), written by playbooks/snapshot.yml.",
              "Install it with `uv pip sync --require-hashes` or playbooks/reproduce.yml; do not edit."]
    return render_lock(lock["distributions"], requires_python=requires, urls=urls, header=header)


def run(module):
    params = module.params
    if params["action"] == "build":
        facts = params["facts"]
        wanted = wanted_by_facts(facts)
        kernel = _kernel_listing(module, (facts.get("sgl_kernel") or {}).get("build_fingerprint"), wanted)
        store = _listing(module, params["wheel_store"], wanted, "wheel_store")
        lock = build_lock(params["name"], facts, store, kernel)
        module.exit_json(changed=False, lock=lock, pylock=_pylock(module, lock))
    try:
        lock = validate_lock(params["lock"])
    except LockError as exc:
        module.fail_json(msg=str(exc))
    if params["action"] == "compare":
        found = drift(lock, params["facts"])
        module.exit_json(changed=False, drift=found, repair=repair(lock, params["facts"], found))
    wanted = wanted_by_lock(lock)
    fingerprint = (lock.get("sgl_kernel") or {}).get("build_fingerprint")
    usable, missing = wheel_sources(lock, _listing(module, params["wheel_store"], wanted, "wheel_store"),
                                    _kernel_listing(module, fingerprint, wanted))
    roots = {"wheel_cache": params["wheel_store"], "kernel_store": _kernel_dir(module, fingerprint)}
    # filename too: the list is the files the stack role's install step fetches (stack_fetch_wheels)
    wheels = [{**{k: v for k, v in w.items() if k != "store"}, "filename": w["file"],
               "path": os.path.join(roots[w["store"]], w["file"])} for w in usable]
    result = {"changed": False, "missing": missing, "requirements": hashed_requirements(lock),
              "wheels": wheels}
    if missing and params["fail_on_missing"]:
        module.fail_json(msg=f"lock {lock['name']}: {len(missing)} distribution(s) cannot be reinstalled, "
                             "nothing was changed: " + "; ".join(missing), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

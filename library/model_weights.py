#!/usr/bin/python
"""Ansible module: stage one model's weights on the host, verified, once (or read a staging's progress)."""

DOCUMENTATION = r"""
---
module: model_weights
short_description: Download a model's weights once per host, resumable, every file verified
description:
  - C(mode=stage) stages the files of one source in C(<root>/<repo>/<revision>); a C(path) source is used
    where it is. A directory whose manifest (C(.model_weights.json)) records the same repository and
    revision as verified is left alone without any network access or hashing.
  - Otherwise it asks the source for its files, sizes and hashes (the Hub's LFS sha256, else the git
    blob sha1; a mirror's manifest), refuses before writing anything when the rest of the download does
    not fit in the free space, downloads each missing file with resume (HTTP Range on a C(.part) file),
    refetches a file whose size or hash is wrong, and writes the manifest only when every file matched.
  - With C(draft_of), the draft's C(config.json) is compared with its target's before the draft's
    weights are downloaded (EAGLE-3 needs an C(*Eagle3) architecture, the target's hidden size and
    vocabulary).
  - Hub sources need huggingface_hub; the role runs this module with its own venv's Python.
  - C(mode=validate) only checks the source mapping (no file, no network), so a role can reject every
    entry's input before the first download.
  - C(mode=progress) reads the progress a running staging writes, waiting at most C(wait) seconds for it
    to finish, and returns one line.
  - C(mode=staged) answers whether the source is staged already (a verified manifest of the same
    repository and revision, or a C(path) source), with what C(mode=stage) would return for it, and never
    asks the source (no network, no hashing); RV(staged) is false otherwise. The role runs it first, so a
    host whose weights are staged needs no background job.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  mode:
    description: C(stage), C(staged), C(validate) or C(progress).
    type: str
    choices: [stage, staged, validate, progress]
    default: stage
  source:
    description:
      - The C(weights) mapping of a served model. One of C(repo) + C(revision) (a Hub repository;
        optional C(endpoint)), C(url) + C(repo) + C(revision) (a mirror serving a staged directory, its
        manifest included), or C(path) (a model directory on the host).
    type: dict
  variable:
    description: How error messages name the source, for example C(sglang_service_models[0].weights).
    type: str
    default: weights
  root:
    description: The weights root shared by every stack of the host.
    type: path
    default: /var/lib/sglang/models
  token:
    description: Hub token (C(HF_TOKEN)); never logged.
    type: str
    default: ""
  endpoint:
    description: Hub endpoint for sources without their own C(endpoint); empty is huggingface_hub's
      default (C(HF_ENDPOINT) or the public Hub).
    type: str
    default: ""
  draft_of:
    description: The staged directory of the target model this source is the speculative draft of.
    type: path
  algorithm:
    description: The speculative algorithm the draft serves (C(EAGLE3) is checked).
    type: str
    default: ""
  timeout:
    description: Seconds a source may take to answer one request.
    type: int
    default: 60
  progress_file:
    description: Where the staging writes its progress and C(mode=progress) reads it; empty is
      C(<dir>/.model_weights/progress.json).
    type: path
  wait:
    description: Seconds to wait for the staging to finish before returning its progress (mode=progress).
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Asks the source and checks the space, downloads nothing.
  diff_mode:
    support: none
    description: No diff.
seealso:
  - module: sglang_server_args
"""

EXAMPLES = r"""
- name: Stage a pinned Hub revision
  model_weights:
    source: {repo: moonshotai/Kimi-K2.5, revision: 3f1a0c2d4e5b6a7980112233445566778899aabb}
    root: /var/lib/sglang/models
    token: "{{ sglang_service_secrets.HF_TOKEN | default('') }}"
  no_log: false
  register: staged

- name: Stage its EAGLE-3 draft, checked against the target first
  model_weights:
    source: {repo: org/kimi-k2.5-eagle3, revision: v1.0}
    draft_of: "{{ staged.dir }}"
    algorithm: EAGLE3

- name: Is it staged already? (no network)
  model_weights:
    mode: staged
    source: {repo: moonshotai/Kimi-K2.5, revision: 3f1a0c2d4e5b6a7980112233445566778899aabb}
  register: present

- name: Read a running staging's progress
  model_weights:
    mode: progress
    progress_file: /var/lib/sglang/models/.progress/main-model.json
    wait: 30
"""

RETURN = r"""
dir:
  description: The staged directory (what C(--model-path) names); with mode=staged, where it would be.
  returned: mode=stage, mode=staged
  type: str
  sample: /var/lib/sglang/models/org/model/v1.0
status:
  description: C(staged) (already there, verified), C(downloaded), C(would download) (check mode) or C(path);
    C(not staged) (mode=staged only).
  returned: mode=stage, mode=staged
  type: str
staged:
  description: The source is staged already (a path source always is); the other keys are then those
    mode=stage returns for it.
  returned: mode=staged
  type: bool
commit:
  description: The commit the revision named when it was staged (absent for a path).
  returned: mode=stage, except for a path
  type: str
files:
  description: Number of files in the repository.
  returned: mode=stage
  type: int
total_bytes:
  description: Size of the repository.
  returned: mode=stage
  type: int
to_download_bytes:
  description: Bytes that were still missing when the run began.
  returned: when the directory was not staged yet
  type: int
downloaded_bytes:
  description: Bytes transferred by this run.
  returned: mode=stage
  type: int
resumed:
  description: Files whose download continued from an earlier, interrupted run.
  returned: mode=stage
  type: list
  elements: str
refetched:
  description: Files that were present with a wrong size or hash, with what was wrong; fetched again.
  returned: mode=stage
  type: list
  elements: str
draft_checked:
  description: The draft's config was compared with the target's and fits.
  returned: when draft_of is set
  type: bool
finished:
  description: The staging has ended (mode=progress).
  returned: mode=progress
  type: bool
msg:
  description: The progress line (mode=progress) or what happened.
  returned: always
  type: str
source:
  description: The source, checked (mode=validate).
  returned: mode=validate
  type: dict
  sample: {kind: hub, repo: org/model, revision: v1.0, endpoint: ""}
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.model_weights import (
    OPENER,
    WeightsError,
    mirror_plan,
    parse_source,
    stage,
    staged_dir,
)
from ansible.module_utils.model_weights_hub import hub_client


def _progress(path, wait):
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(path, encoding="utf-8") as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            state = {"finished": False, "line": "waiting for the download to start"}
        if state.get("finished") or time.monotonic() >= deadline:
            return {"finished": bool(state.get("finished")), "msg": state.get("line", "")}
        time.sleep(0.2)  # a small file read; a staging that needs no download ends in well under 1 s


class _NotStaged(Exception):
    """mode=staged: the source would have to be asked (the directory is not staged)."""


def _ask_nothing():
    raise _NotStaged


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["stage", "staged", "validate", "progress"],
                     "default": "stage"},
            "source": {"type": "dict"},
            "variable": {"type": "str", "default": "weights"},
            "root": {"type": "path", "default": "/var/lib/sglang/models"},
            "token": {"type": "str", "default": "", "no_log": True},
            "endpoint": {"type": "str", "default": ""},
            "draft_of": {"type": "path"},
            "algorithm": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 60},
            "progress_file": {"type": "path"},
            "wait": {"type": "int", "default": 30},
        },
        required_if=[("mode", "stage", ["source"]), ("mode", "staged", ["source"]),
                     ("mode", "validate", ["source"]), ("mode", "progress", ["progress_file"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["mode"] == "progress":
        module.exit_json(changed=False, **_progress(p["progress_file"], p["wait"]))
    try:
        source = parse_source(p["source"], p["variable"])
    except WeightsError as exc:
        module.fail_json(msg=str(exc))  # names the variable itself
    if p["mode"] == "validate":
        module.exit_json(changed=False, source=source, msg=f"{p['variable']}: {source['kind']} source")
    staged_only = p["mode"] == "staged"
    try:
        if staged_only:  # the source is never asked: _ask_nothing raises where stage() would ask it
            plan, file_url, headers = _ask_nothing, None, {}
        elif source["kind"] == "hub":
            source["endpoint"] = source["endpoint"] or p["endpoint"].rstrip("/")
            plan, file_url, headers = hub_client(source, p["token"], p["timeout"])
        else:
            headers = {}
            def plan():
                return mirror_plan(source, p["timeout"], OPENER)

            def file_url(commit, name):
                return f"{source.get('url')}/{name}"
        result = stage(source, p["root"], plan=plan, file_url=file_url, headers=headers,
                       draft_of=p["draft_of"], algorithm=p["algorithm"], check_mode=module.check_mode,
                       timeout=p["timeout"], progress_file="" if staged_only else p["progress_file"] or "")
    except _NotStaged:
        where = staged_dir(p["root"], source)
        module.exit_json(changed=False, staged=False, dir=where, status="not staged",
                         msg=f"{where}: not staged")
    except WeightsError as exc:
        module.fail_json(msg=f"{p['variable']}: {exc}")
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"{p['variable']}: staging failed unexpectedly: {type(exc).__name__}: {exc}")
    result["msg"] = (f"{result['dir']}: {result['status']} ({result['files']} files, "
                     f"{result['total_bytes']} bytes)")
    if staged_only:
        result["staged"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()

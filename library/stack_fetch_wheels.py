#!/usr/bin/python
"""Ansible module: fetch a lock's files into a directory, each checked against its sha256."""

DOCUMENTATION = r"""
---
module: stack_fetch_wheels
short_description: Fetch the files a lock names, hash-checked, without pip or uv
description:
  - Puts every file of O(files) into O(dest) under its own name, checked against its sha256; a file
    already there with the right sha256 is kept (a file's identity is its name and sha256).
  - Sources, tried in order - each of O(mirrors) (a local directory, or an http(s) base URL holding the
    files under their own names - a served wheel cache, an offline bundle), then the URL the lock
    recorded unless O(use_lock_urls) is false.
  - A partial download is resumed the next time (HTTP Range), also one a dropped connection cut short
    (fewer bytes than the server's Content-Length - named as such, not as a wrong sha256). A file whose
    content does not match the lock's sha256 is never kept. Every file is tried before the module
    fails naming each one it could not get and why, so a run installs nothing from an incomplete set
    (with O(missing_ok), it lists them instead).
  - A server that does not answer (connection refused, unknown name, silent until O(timeout)) is not
    asked again for the other files of the run - one timeout per server, not one per file.
  - Reads no pip or uv configuration and no C(PIP_*) / C(UV_*) variables.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  files:
    description: The files (name, version, filename, url, sha256), as the stack_pylock module returns them.
    type: list
    elements: dict
    required: true
  dest:
    description: Directory to put them in (created when missing).
    type: path
    required: true
  mirrors:
    description: Local directories or http(s) base URLs tried before the lock's own URLs.
    type: list
    elements: str
    default: []
  use_lock_urls:
    description: Also try the URL the lock recorded for each file (false - mirrors only, no index).
    type: bool
    default: true
  timeout:
    description: Seconds a source may take to answer.
    type: int
    default: 60
  missing_ok:
    description:
      - List the files no source had in RV(missing) (with RV(reasons)) instead of failing, for a caller
        that gets them from elsewhere (C(reproduce) copies those from the controller).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: In check mode nothing is downloaded; files not yet in O(dest) are listed as missing.
  diff_mode:
    support: none
    description: No diff.
notes:
  - Supports check mode.
seealso:
  - module: stack_pylock
"""

EXAMPLES = r"""
- name: Fetch the stack's wheels into the host's wheel store
  stack_fetch_wheels:
    files: "{{ lock.files }}"
    dest: /var/cache/sglang/wheels
    mirrors: ["http://10.0.0.1:8080/"]

- name: Fetch what the mirror holds; list the rest for another source
  stack_fetch_wheels:
    files: "{{ wheels }}"
    dest: /var/tmp/sglang-reproduce
    mirrors: ["http://10.0.0.1:8080/"]
    use_lock_urls: false
    missing_ok: true
  register: fetched
"""

RETURN = r"""
fetched:
  description: Files fetched by this run.
  returned: always
  type: list
  elements: str
present:
  description: Files that were already there with the right sha256.
  returned: always
  type: list
  elements: str
missing:
  description: In check mode, files a real run would fetch; with O(missing_ok), also the files no source had.
  returned: always
  type: list
  elements: str
reasons:
  description:
    - With O(missing_ok), why each file of RV(missing) could not be had (every source tried and its
      answer), by file name.
  returned: always
  type: dict
  sample:
    six-1.17.0-py3-none-any.whl: >-
      six-1.17.0-py3-none-any.whl (six==1.17.0):
      http://10.0.0.1:8080/six-1.17.0-py3-none-any.whl: HTTP 404
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.wheel_fetch import FetchError, fetch_all


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True},
            "dest": {"type": "path", "required": True},
            "mirrors": {"type": "list", "elements": "str", "default": []},
            "use_lock_urls": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 60},
            "missing_ok": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    for item in params["files"]:
        if not all(
            isinstance(item.get(key), str) and item.get(key) for key in ("filename", "sha256", "name")
        ):
            module.fail_json(msg=f"every file needs name, filename and sha256 strings, got {item!r}")
        if "/" in item["filename"] or item["filename"].startswith("."):
            module.fail_json(msg=f"{item['filename']!r} is not a plain file name")
    try:
        result = fetch_all(
            params["files"],
            params["dest"],
            params["mirrors"],
            params["use_lock_urls"],
            params["timeout"],
            check_only=module.check_mode,
            missing_ok=params["missing_ok"],
        )
    except FetchError as exc:
        module.fail_json(msg=f"{exc}. Nothing was installed.")
    except OSError as exc:
        module.fail_json(msg=f"{params['dest']}: {exc.strerror or exc}")
    module.exit_json(changed=bool(result["fetched"]), **result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
"""Ansible module: put a source-built kernel's archive and its FetchContent sources into an offline bundle."""

DOCUMENTATION = r"""
---
module: stack_bundle_kernel_source
short_description: Bundle the kernel's source archive and its configure-time sources, hash-checked
description:
  - Puts the kernel's source archive into C(<dest>/source/) - O(archive_url), else GitHub's archive of
    O(ref) of the GitHub repository O(git_url), fetched under O(github_url) - checked against
    O(archive_sha256) when given. Without it, an archive already in the bundle is kept (the bundle pins
    what it first fetched; its sha256 is returned).
  - Reads every C(FetchContent_Declare) of the kernel package directory's CMakeLists.txt and cmake/*.cmake
    inside the archive (O(subdir), else C(python/sglang/kernels/aot) or C(sgl-kernel), whichever holds a
    CMakeLists.txt) and puts each tarball into C(<dest>/github/<owner>/<repo>/archive/<file>), fetched from
    O(github_url) and checked against its C(URL_HASH) sha256, so that the served C(github/) directory is a
    mirror for the sgl_kernel role (C(sgl_kernel_source_mirror_url)).
  - Fails naming each dependency a bundle cannot carry (a git clone, a URL with no SHA256 pin, a URL not on
    GitHub) and each file that could not be fetched or did not match its sha256. A file that does not match
    is never kept; downloads are written to a hidden C(.part) file and renamed only once checked.
  - A file's identity is its name and sha256 - files already there with their sha256 are not fetched again.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  dest:
    description: The bundle's directory (C(source/) and C(github/) are created in it).
    type: path
    required: true
  archive_url:
    description: The source archive (http(s) URL, C(file://) URL or a path); empty derives it from O(git_url).
    type: str
    default: ""
  git_url:
    description:
      - The source's git URL (C(https://github.com/<owner>/<repo>[.git])), used when O(archive_url) is empty.
    type: str
    default: ""
  ref:
    description: The commit or tag whose archive is bundled, used when O(archive_url) is empty.
    type: str
    default: ""
  archive_sha256:
    description:
      - The archive's sha256 (hex); empty - not checked, the bundle pins the archive it first fetched.
    type: str
    default: ""
  subdir:
    description:
      - The kernel package directory inside the archive; empty - C(python/sglang/kernels/aot) or
        C(sgl-kernel), whichever holds a CMakeLists.txt.
    type: str
    default: ""
  github_url:
    description: Base URL of GitHub or of a mirror of it, for the derived archive and every dependency.
    type: str
    default: https://github.com
  timeout:
    description: Seconds a server may take to answer.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: >-
      In check mode nothing is fetched or written; files a real run would fetch are listed in RV(missing)
      (the dependencies only once the archive is in the bundle).
  diff_mode:
    support: none
    description: No diff.
notes:
  - Supports check mode.
seealso:
  - module: sgl_kernel_build
  - module: stack_fetch_wheels
"""

EXAMPLES = r"""
- name: Bundle the kernel source of the nightly profile
  stack_bundle_kernel_source:
    dest: bundles/nightly
    git_url: https://github.com/sgl-project/sglang.git
    ref: v0.5.23
    subdir: python/sglang/kernels/aot
"""

RETURN = r"""
archive:
  description: The source archive in the bundle.
  returned: always
  type: dict
  contains:
    path:
      description: Its path relative to O(dest) (C(source/<file>)).
      type: str
    url:
      description: Where it was fetched from.
      type: str
    sha256:
      description: Its sha256 (null in check mode when it is not there yet and no O(archive_sha256) is given).
      type: str
    state:
      description: C(fetched), C(present) or (check mode) C(missing).
      type: str
package_dir:
  description: The kernel package directory inside the archive (null in check mode without the archive).
  returned: always
  type: str
  sample: python/sglang/kernels/aot
dependencies:
  description: The configure-time sources in the bundle, one per file.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The FetchContent name (the first one declaring the file).
      type: str
    url:
      description: The URL the CMake file declares.
      type: str
    path:
      description: Its path relative to O(dest) (C(github/<owner>/<repo>/archive/<file>)).
      type: str
    sha256:
      description: Its URL_HASH sha256, which the file has.
      type: str
    state:
      description: C(fetched), C(present) or (check mode) C(missing).
      type: str
fetched:
  description: Paths (relative to O(dest)) fetched by this run.
  returned: always
  type: list
  elements: str
present:
  description: Paths that were already there with the right sha256.
  returned: always
  type: list
  elements: str
missing:
  description: In check mode, paths a real run would fetch.
  returned: always
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kernel_source_bundle import BundleError, bundle_kernel_source, source_archive_url


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "archive_url": {"type": "str", "default": ""},
            "git_url": {"type": "str", "default": ""},
            "ref": {"type": "str", "default": ""},
            "archive_sha256": {"type": "str", "default": ""},
            "subdir": {"type": "str", "default": ""},
            "github_url": {"type": "str", "default": "https://github.com"},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    try:
        bundle(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"stack_bundle_kernel_source failed unexpectedly: {type(exc).__name__}: {exc}")


def bundle(module):
    params = module.params
    sha256 = params["archive_sha256"].strip().lower()
    if sha256 and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        module.fail_json(msg=f"archive_sha256 {params['archive_sha256']!r} is not a sha256 (64 hex)")
    try:
        url = source_archive_url(params["archive_url"], params["git_url"], params["ref"],
                                 params["github_url"])
        result = bundle_kernel_source(params["dest"], url, sha256=sha256, subdir=params["subdir"],
                                      github_url=params["github_url"], timeout=params["timeout"],
                                      check_only=module.check_mode)
    except BundleError as exc:
        module.fail_json(msg=f"{exc}. The bundle holds no unchecked file.")
    except OSError as exc:
        module.fail_json(msg=f"{params['dest']}: {exc.strerror or exc}")
    module.exit_json(changed=bool(result["fetched"]), **result)


if __name__ == "__main__":
    main()

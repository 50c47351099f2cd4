#!/usr/bin/python
"""Ansible module: one host's verify checks from read-only task results (module_utils/verify_report)."""

DOCUMENTATION = r"""
---
module: verify_checks
short_description: Turn one host's registered verify results into checks with a status and a detail
description:
  - Takes the registered results of C(playbooks/verify.yml)'s read-only tasks for one host (gpu_facts,
    stack_facts, torch_cuda_archs, sgl_kernel_variants, cuda_binary_archs, the service and gateway health
    requests, the lock comparison) and returns one check per concern with status C(ok), C(fail) or
    C(skip) and a detail in words. A task that did not run (C(skipped)) becomes a C(skip) saying why.
  - A host whose nvidia-smi is installed but sees no usable GPU (driver not loaded, hung, or a
    Driver/library version mismatch) fails the C(gpu) check; a host without nvidia-smi skips it.
  - The C(topology) check reads gpu_facts' C(topology). On a host with several GPUs and no NVLink, GPU
    pairs that cannot use peer-to-peer over PCIe fail it (or only warn, O(p2p_required=false)), with
    the cause (ACS or the IOMMU redirecting peer traffic) and the fix.
  - A check may carry its own C(cause) and C(fix) when it knows the failure better than the doctor's
    table in module_utils/verify_report.py; verify_report fills in the rest.
  - Pure computation; runs anywhere (the playbook delegates it to the controller). Never C(changed).
version_added: "0.2.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  gpu:
    description: Result of gpu_facts.
    type: dict
    required: true
  stack:
    description: Result of stack_facts.
    type: dict
    required: true
  torch:
    description: Result of torch_cuda_archs (or a skipped result).
    type: dict
    default: {}
  kernel:
    description: Result of sgl_kernel_variants (or a skipped result).
    type: dict
    default: {}
  scan:
    description: Result of cuda_binary_archs over the stack (or a skipped result).
    type: dict
    default: {}
  service:
    description:
      - Health of the model services on this host, each a C(name), C(url), C(status) (-1 when nothing
        answered) and C(msg) (the sglang_service role's C(probe) entries, C(sglang_service_health)), or one
        ansible.builtin.uri result; empty or skipped when the host serves no model.
    type: raw
    default: []
  gateway:
    description: Health of the gateway on this host (C(sglang_service_gateway_health)), as for I(service).
    type: raw
    default: []
  drift:
    description: Result of stack_lock with action=compare, or a skipped result.
    type: dict
    default: {}
  speculative:
    description:
      - The speculative-acceptance results of this host's drafting models (the fact
        C(sglang_service_spec_acceptance) of the sglang_service role's C(spec_gate)); empty for none, and then
        the host has no C(speculative) check.
    type: list
    elements: dict
    default: []
  scan_ignore:
    description: Path fragments of CUDA binaries whose gaps are expected (e.g. C(flash_ops), Hopper-only).
    type: list
    elements: str
    default: []
  p2p_required:
    description:
      - Whether GPUs that cannot reach each other peer-to-peer fail the host (tensor parallel over them
        hangs or crawls); V(false) only warns, for hosts that serve one model per GPU.
    type: bool
    default: true
  stack_expected:
    description:
      - Whether the host should have a CUDA stack. V(false) for a gateway-only host (site.yml gives it the
        profile's uv and smg, no stack) makes a missing toolkit and stack a skip; a stack that is there anyway
        is checked as on any host.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Pure computation; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: Turn the results into checks
  verify_checks:
    gpu: "{{ verify_gpu }}"
    stack: "{{ verify_stack }}"
    torch: "{{ verify_torch }}"
  delegate_to: localhost
  register: verify_host
"""

RETURN = r"""
checks:
  description: One entry per check.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: >-
        C(gpu), C(driver), C(topology), C(cuda), C(torch), C(kernel), C(environment), C(service),
        C(speculative), C(gateway), C(drift).
      type: str
    status:
      description: C(ok), C(warn) (reported, not failing), C(fail) or C(skip).
      type: str
    detail:
      description: What was found, in words.
      type: str
    figures:
      description: Check C(speculative) only, per drafting model, its measured acceptance length.
      type: list
      elements: dict
      returned: for the speculative check
    cause:
      description: The likely cause, when this check knows it better than the doctor's table.
      type: str
      returned: on some failures
    fix:
      description: The fix, when this check knows it better than the doctor's table.
      type: str
      returned: on some failures
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.verify_report import host_checks

RESULTS = ("torch", "kernel", "scan", "drift")
HEALTH = ("service", "gateway")


def main():
    module = AnsibleModule(
        argument_spec={
            "gpu": {"type": "dict", "required": True},
            "stack": {"type": "dict", "required": True},
            **{name: {"type": "dict", "default": {}} for name in RESULTS},
            **{name: {"type": "raw", "default": []} for name in HEALTH},
            "scan_ignore": {"type": "list", "elements": "str", "default": []},
            "speculative": {"type": "list", "elements": "dict", "default": []},
            "p2p_required": {"type": "bool", "default": True},
            "stack_expected": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    for name in HEALTH:
        value = params[name]
        listed = isinstance(value, list) and all(isinstance(v, dict) for v in value)
        if not (isinstance(value, dict) or listed):
            module.fail_json(msg=f"{name}: expected a list of health results (name, url, status, msg) or one "
                                 f"ansible.builtin.uri result, got {type(value).__name__}: {value!r:.200}")
    try:
        checks = host_checks(params["gpu"], params["stack"], scan_ignore=params["scan_ignore"],
                             p2p_required=params["p2p_required"], speculative=params["speculative"],
                             stack_expected=params["stack_expected"],
                             **{name: params[name] for name in RESULTS + HEALTH})
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"verify_checks failed unexpectedly: {type(exc).__name__}: {exc}")
    module.exit_json(changed=False, checks=checks)


if __name__ == "__main__":
    main()

"""The entry point of a library/ module that has two ways in: a module process (AnsibleModule, here) and
the controller's worker (action_plugins/controller_module.py, which calls the module file's ``run``).

Such a module file defines ``ARGUMENT_SPEC`` (the one specification both ways validate against) and
``run(params) -> dict`` (its result; ``failed`` and ``msg`` when it fails), and its ``main()`` is
``run_module(ARGUMENT_SPEC, run)``. Every such module supports check mode: each only computes on its
arguments and reads files.
"""

from ansible.module_utils.basic import AnsibleModule


def run_module(argument_spec, run):
    """Validate the arguments, run ``run(params)`` and leave with its result (fail_json when it failed)."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    result = run(module.params)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)

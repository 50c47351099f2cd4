"""Strict checks of a host's project variables against the roles' typed argument specs.

ansible-core validates a role's arguments when the role starts, but leniently: the string "false"
becomes False, the float 12.0 becomes the string "12.0", and a misspelled variable is silently
ignored (the role then uses its default). Preflight runs these stricter checks for every host before
anything changes, so a typo or a quoting mistake stops the run with the host and variable named.

Stdlib only; shared by library/inventory_check.py and the unit tests.
"""

import difflib

from ansible.module_utils.cuda_arch import ArchError, parse_capability

_BOOL_STRINGS = ("yes", "no", "true", "false", "on", "off", "y", "n", "1", "0")


def known_options(specs):
    """Flatten {role: argument_specs document} into {variable name: (role, option spec)}."""
    options = {}
    for role, document in sorted((specs or {}).items()):
        entry_points = (document or {}).get("argument_specs") or {}
        for entry in entry_points.values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                options.setdefault(name, (role, spec or {}))
    return options


def _type_problem(value, spec, where):
    """A message when ``value`` does not have the exact type ``spec`` declares, else None."""
    expected = spec.get("type", "str")
    if value is None:
        return None if not spec.get("required") else f"{where} is required and must not be null"
    if expected == "raw":
        return None
    if expected == "bool":
        if isinstance(value, bool):
            return None
        if isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS:
            meant = "true" if value.strip().lower() in ("yes", "true", "on", "y", "1") else "false"
            return (f"{where} is the string {value!r}, not a boolean; write {meant} without quotes "
                    "(a quoted string is true in a `when:`, even \"false\"); on the command line "
                    "-e NAME=true passes a string: give JSON, -e '{\"NAME\": true}'")
        return f"{where} must be a boolean (true/false), got {type(value).__name__} {value!r}"
    if expected in ("str", "path"):
        if isinstance(value, str):
            return None
        return (f"{where} must be a string, got {type(value).__name__} {value!r}; quote it in YAML "
                f"(e.g. \"{value}\") so it is not read as a number or boolean")
    if expected == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return None
        return f"{where} must be an integer, got {type(value).__name__} {value!r}"
    if expected == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return None
        return f"{where} must be a number, got {type(value).__name__} {value!r}"
    if expected == "list":
        if not isinstance(value, list):
            return f"{where} must be a list, got {type(value).__name__} {value!r}"
        return None
    if expected == "dict":
        if not isinstance(value, dict):
            return f"{where} must be a mapping, got {type(value).__name__} {value!r}"
        return None
    return None


def check_value(name, value, spec):
    """Problems (list of str) with one variable's value, recursing into list elements and suboptions."""
    problem = _type_problem(value, spec, name)
    if problem:
        return [problem]
    if value is None:
        return []
    problems = []
    choices = spec.get("choices")
    if spec.get("type") == "list":
        element_spec = {"type": spec.get("elements", "raw"), "options": spec.get("options")}
        for index, item in enumerate(value):
            problems.extend(check_value(f"{name}[{index}]", item, element_spec))
            if choices and item not in choices:
                problems.append(f"{name}[{index}] is {item!r}; allowed: {', '.join(map(str, choices))}")
    elif choices and value not in choices:
        problems.append(f"{name} is {value!r}; allowed: {', '.join(map(str, choices))}")
    suboptions = spec.get("options")
    if suboptions and isinstance(value, dict):
        for key, item in value.items():
            if key not in suboptions:
                hint = _did_you_mean(key, suboptions)
                problems.append(f"{name} has an unknown key {key!r}{hint}")
            else:
                problems.extend(check_value(f"{name}.{key}", item, suboptions[key] or {}))
    return problems


def check_capability(name, value):
    """Capability variables (``*_capability`` string, ``*_capabilities`` list) must be exact "X.Y"."""
    values = value if name.endswith("_capabilities") and isinstance(value, list) else [value]
    problems = []
    for item in values:
        if item is None:
            continue
        try:
            canonical = parse_capability(item)
        except ArchError as exc:
            problems.append(f"{name}: {exc}")
            continue
        if canonical != item:
            problems.append(f"{name} is {item!r}; write the capability as \"{canonical}\"")
    return problems


_SECRET_HINT = ("quote it in YAML (unquoted digits are a number: leading zeros are lost, and a leading 0 "
                "makes it octal); the value is not shown")


def check_secret(name, value, spec):
    """Problems with a secret's value (a no_log option): its type only; no message holds any of the value.

    A string option must be a string, and a mapping of secrets (``type: dict``) must map names to
    strings: ansible-core would turn the number 0123456 into "42798" without a word.
    """
    expected = spec.get("type", "str")
    if value is None:
        return []
    if expected == "dict":
        if not isinstance(value, dict):
            return [f"{name} must be a mapping of names to strings, got {type(value).__name__}"]
        return [f"{name}.{key} must be a string, got {type(item).__name__}; {_SECRET_HINT}"
                for key, item in value.items() if not isinstance(item, str)]
    if expected in ("str", "path") and not isinstance(value, str):
        return [f"{name} must be a string, got {type(value).__name__}; {_SECRET_HINT}"]
    return []


def _did_you_mean(name, candidates):
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_host_variables(host, variables, specs, *, prefixes=(), removed=None, names=(), secrets=None):
    """All problems with one host's project variables, each message naming the host and variable.

    ``variables``: {name: value} of the host's variables whose values are checked (known, not secret).
    ``names``: every project-prefixed variable the host has; names without a value in ``variables``
    (secrets, unknown names) are checked by name only, so no secret value ever reaches this module.
    ``specs``: {role: parsed meta/argument_specs.yml}; every role name is also a policed prefix.
    ``prefixes``: further policed prefixes (inventory-level variables such as ``gpu_``).
    ``removed``: {name: what to do instead} for variables that no longer exist or never worked.
    ``secrets``: {name: value} of the host's secrets (options with ``no_log``), checked by type only
    (check_secret), so no message repeats their values.
    """
    options = known_options(specs)
    policed = tuple(sorted({f"{role}_" for role in (specs or {})} | set(prefixes)))
    removed = removed or {}
    secrets = secrets or {}
    problems = []
    for name in sorted(set(variables) | set(names) | set(secrets)):
        value = variables.get(name)
        if name in removed:
            found = [f"{name} is not supported: {removed[name]}"]
        elif name in secrets and name in options:
            found = check_secret(name, secrets[name], options[name][1])
        elif name in options:
            found = check_value(name, value, options[name][1]) if name in variables else []
        elif name.startswith(policed):
            found = [f"{name} is not a variable of this project{_did_you_mean(name, options)}"]
        else:
            continue
        if not found and name in variables and name.endswith(("_capability", "_capabilities")):
            found = check_capability(name, value)
        problems.extend(found)
    return [f"host {host}: {problem}" for problem in problems]

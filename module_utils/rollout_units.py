"""The units a rolling rebuild moves, and its batches.

A unit is one host, or every host of a model that spans several (an entry of ``sglang_service_models`` with
``nodes_group``: SGLang's multi-node tensor parallel, one node rank per host of that inventory group). The
ranks of such a model form one process group: they must run the same stack and restart together, gated at
rank 0, so a rollout takes all of them out of rotation, switches and restarts them as one. Hosts joined by
models that share hosts are one unit (the groups are merged).

``rolling_rebuild_serial`` counts units per batch (a number, or a percentage of the units, rounded down and
at least 1, as Ansible reads a percentage ``serial``); the play's ``serial`` keyword gets the batch sizes in
hosts, in the order of ``plan()['order']``.

Stdlib only; shared by library/rollout_units.py and the unit tests.
"""


class UnitsError(ValueError):
    """The inventory or the batch size cannot be rolled as given; the message says what to change."""


def _entries(models):
    """The host's model entries that are mappings (preflight's inventory check reports the others)."""
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def units(hosts, models_by_host, groups):
    """(units, problems): the hosts joined by nodes_group, each unit in the order of ``hosts``.

    ``problems`` names each model whose group is empty or unknown, or has a host outside ``hosts``."""
    hosts = list(hosts)
    known = set(hosts)
    root = {h: h for h in hosts}

    def find(h):
        while root[h] != h:
            root[h] = root[root[h]]
            h = root[h]
        return h

    problems = []
    for host in hosts:
        for model in _entries(models_by_host.get(host)):
            group = model.get("nodes_group")
            if not group:
                continue
            name = model.get("name", "?")
            members = list(groups.get(group) or [])
            if host not in members:
                what = "without this host" if members else "that is not in the inventory or has no host"
                problem = f"{host}: model {name!r} names nodes_group {group!r}, a group {what}"
                if problem not in problems:
                    problems.append(problem)
                continue
            outside = [m for m in members if m not in known]
            if outside:
                verb = "is" if len(outside) == 1 else "are"
                problem = (f"model {name!r} spans {', '.join(members)} (nodes_group {group!r}), but "
                           f"{', '.join(outside)} {verb} not among the hosts to roll: its ranks restart "
                           "together, so roll all of them or none")
                if problem not in problems:
                    problems.append(problem)
                continue
            for member in members:
                a, b = find(host), find(member)
                if a != b:
                    root[b] = a
    joined = {}
    for host in hosts:
        joined.setdefault(find(host), []).append(host)
    return list(joined.values()), problems


def units_per_batch(serial, count):
    """Units in one batch for ``serial`` (an int, a digit string or "N%") and ``count`` units."""
    text = str(serial).strip()
    if isinstance(serial, bool) or not text:
        raise UnitsError(f"rolling_rebuild_serial must be a number or a percentage, got {serial!r}")
    if text.endswith("%"):
        digits = text[:-1].strip()
        if not digits.isdigit() or not 0 < int(digits) <= 100:
            raise UnitsError(f"rolling_rebuild_serial {serial!r}: a percentage from 1% to 100%")
        return max(1, int(int(digits) / 100.0 * count))
    if not text.isdigit() or int(text) < 1:
        raise UnitsError(f"rolling_rebuild_serial must be a number of at least 1 or a percentage such as "
                         f"\"25%\", got {serial!r}")
    return int(text)


def plan(hosts, models_by_host, groups, serial=1):
    """{"units", "order", "batches", "batch_hosts", "unit_of"}; raises UnitsError naming every problem."""
    found, problems = units(hosts, models_by_host, groups)
    if problems:
        raise UnitsError("; ".join(problems))
    size = units_per_batch(serial, len(found))
    chunks = [found[i:i + size] for i in range(0, len(found), size)]
    batch_hosts = [[h for unit in chunk for h in unit] for chunk in chunks]
    return {
        "units": found,
        "order": [h for unit in found for h in unit],
        "batches": [len(b) for b in batch_hosts],
        "batch_hosts": batch_hosts,
        "unit_of": {h: unit for unit in found for h in unit},
    }

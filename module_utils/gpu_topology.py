"""How a host's GPUs reach each other: ``nvidia-smi topo -m`` and, over PCIe, ``nvidia-smi topo -p2p``.

Tensor parallel over PCIe (8x RTX PRO 6000, no NVLink) needs GPU peer-to-peer. When the PCIe switches'
ACS or the IOMMU sends peer traffic up to the root complex, NCCL hangs on the first all-reduce or
crawls, and the server "hangs after loading". This reads, per GPU pair, the link nvidia-smi names (NV#,
PIX, PXB, PHB, NODE, SYS), which GPUs share a PCIe switch or a host bridge, and on hosts with several
GPUs and no NVLink the driver's peer-to-peer read and write status of every pair.

Both matrices are tab-separated, with ANSI underline codes around the header (captured on an H200,
driver 580.159.04: tests/stand_ins/nvidia-smi-recordings/h200-topo-2026-12-01), and nvidia-smi puts an
empty cell before "GPU NUMA ID"; each ends with the legend that names its codes.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import itertools
import re

from ansible.module_utils.nvidia_smi import _run

MATRIX_ARGS = ("topo", "-m")
P2P_ARGS = {"read": ("topo", "-p2p", "r"), "write": ("topo", "-p2p", "w")}
# The PCIe paths of `topo -m`, nearest first; the words are nvidia-smi 580's legend.
PCIE_LINKS = {
    "PIX": "at most a single PCIe bridge",
    "PXB": "multiple PCIe bridges, without the PCIe host bridge",
    "PHB": "a PCIe host bridge (typically the CPU)",
    "NODE": "the interconnect between PCIe host bridges within a NUMA node",
    "SYS": "the SMP interconnect between NUMA nodes (e.g. QPI/UPI)",
}
# Links that stay below a PCIe switch (no host bridge on the way), and those that stay below one host
# bridge (root complex).
SWITCH_LINKS = ("PIX", "PXB")
HOST_BRIDGE_LINKS = ("PIX", "PXB", "PHB")
# `topo -p2p` statuses (nvidia-smi 580's legend).
P2P_STATUSES = {
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "NS": "Not supported",
    "U": "Unknown",
}

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE_RE = re.compile(r"^(GPU|NIC)(\d+)$")
_NVLINK_RE = re.compile(r"^NV(\d+)$")
_LEGEND_RE = re.compile(r"^\s*(\S+)\s+=\s+(.*\S)\s*$")
_NIC_RE = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")


class TopologyError(ValueError):
    """nvidia-smi topo answered in a shape this module does not know."""


def parse_matrix(text):
    """{"columns", "rows", "extra", "legend", "nics"} of a ``topo -m`` or ``topo -p2p`` answer.

    ``columns`` are the device columns (GPU0.., NIC0..), ``rows`` maps each row's device to its cells
    under those columns, ``extra`` each row's other columns by header name (CPU Affinity, ...),
    ``legend`` the codes the answer explains, ``nics`` the NIC legend (NIC0 -> mlx5_0).
    """
    lines = _ANSI_RE.sub("", text).splitlines()
    # The header is the first line naming a device; its first cell, above the row names, is empty
    # (and gone when the answer was stripped).
    start = next((n for n, line in enumerate(lines)
                  if any(_DEVICE_RE.match(cell.strip()) for cell in line.split("\t"))), None)
    if start is None:
        first = next((line.strip() for line in lines if line.strip()), "no output")
        raise TopologyError(f"no GPU columns in the matrix (first line {first[:200]!r})")
    header = [cell.strip() for cell in lines[start].split("\t")]
    header = header[1:] if not header[0] else header
    width = next((n for n, cell in enumerate(header) if not _DEVICE_RE.match(cell)), len(header))
    columns, extra_names = header[:width], [cell for cell in header[width:] if cell]
    rows, extra, end = {}, {}, len(lines)
    for number in range(start + 1, len(lines)):
        line = lines[number]
        if not line.strip() or line.strip().startswith("Legend"):
            end = number
            break
        cells = line.split("\t")
        label = cells[0].strip()
        if not _DEVICE_RE.match(label) or len(cells) < width + 1:
            raise TopologyError(f"unexpected matrix row {line.strip()!r} (want a device and {width} "
                                f"cells for {', '.join(columns)})")
        rows[label] = [cell.strip() for cell in cells[1:width + 1]]
        extra[label] = dict(zip(extra_names, [cell.strip() for cell in cells[width + 1:] if cell.strip()]))
    legend, nics = {}, {}
    for line in lines[end:]:
        nic = _NIC_RE.match(line)
        if nic:
            nics[nic.group(1)] = nic.group(2)
            continue
        code = _LEGEND_RE.match(line)
        if code:
            legend[code.group(1)] = code.group(2)
    return {"columns": columns, "rows": rows, "extra": extra, "legend": legend, "nics": nics}


def _gpu_number(name):
    return int(name[3:])


def _gpu_cells(matrix):
    """{(i, j): cell} for every ordered pair of distinct GPUs of the matrix."""
    gpus = [c for c in matrix["columns"] if c.startswith("GPU")]
    cells = {}
    for row in gpus:
        if row not in matrix["rows"]:
            raise TopologyError(f"the matrix has a {row} column but no {row} row")
        for column in gpus:
            if row != column:
                cells[(_gpu_number(row), _gpu_number(column))] = matrix["rows"][row][
                    matrix["columns"].index(column)]
    return cells


def link_meaning(code, legend=None):
    """The path a ``topo -m`` code stands for, in words."""
    nvlink = _NVLINK_RE.match(code)
    if nvlink:
        return f"NVLink ({nvlink.group(1)} bonded links)"
    if code in PCIE_LINKS:
        return f"PCIe through {PCIE_LINKS[code]}"
    return (legend or {}).get(code) or f"unknown link code {code!r}"


def groups(links, kinds):
    """Sets of GPUs joined by links of ``kinds``, each sorted, ordered by their first GPU; a GPU without
    such a link is in none (it shares nothing)."""
    parent = {}

    def root(gpu):
        while parent.setdefault(gpu, gpu) != gpu:
            gpu = parent[gpu]
        return gpu

    for link in links:
        if link["link"] in kinds:
            first, second = (root(gpu) for gpu in link["gpus"])
            parent[max(first, second)] = min(first, second)
    members = {}
    for gpu in list(parent):
        members.setdefault(root(gpu), []).append(gpu)
    return sorted(sorted(group) for group in members.values())  # disjoint: ordered by the first GPU


def topology_from(matrix, p2p=None):
    """Topology facts from a parsed ``topo -m`` matrix and, when read, the parsed p2p matrices
    (``{"read": matrix, "write": matrix}``)."""
    cells = _gpu_cells(matrix)
    numbers = sorted(_gpu_number(c) for c in matrix["columns"] if c.startswith("GPU"))
    p2p_cells = {kind: _gpu_cells(answer) for kind, answer in sorted((p2p or {}).items())}
    links = []
    for first, second in itertools.combinations(numbers, 2):
        code = cells[(first, second)]
        link = {"gpus": [first, second], "link": code, "path": link_meaning(code, matrix["legend"])}
        for kind, statuses in p2p_cells.items():
            if (first, second) not in statuses:  # then (second, first) is not either
                raise TopologyError(f"the p2p {kind} matrix has no GPU{first}/GPU{second} pair")
            # A pair is as good as its worse direction; nvidia-smi lists both.
            there, back = statuses[(first, second)], statuses[(second, first)]
            link[f"p2p_{kind}"] = there if there != "OK" else back
        links.append(link)
    affinity = [dict({"gpu": _gpu_number(row)}, **{name.lower().replace(" ", "_"): value
                                                  for name, value in matrix["extra"][row].items()})
                for row in matrix["rows"] if row.startswith("GPU")]
    broken = [dict(gpus=link["gpus"], link=link["link"],
                   **{kind: link[f"p2p_{kind}"] for kind in sorted(p2p or {})})
              for link in links if any(link[f"p2p_{kind}"] != "OK" for kind in (p2p or {}))]
    return {
        "present": True, "reason": None, "gpu_count": len(numbers),
        "nvlink": any(_NVLINK_RE.match(link["link"]) for link in links),
        "links": links,
        "pcie_switch_groups": groups(links, SWITCH_LINKS),
        "host_bridge_groups": groups(links, HOST_BRIDGE_LINKS),
        "affinity": affinity, "nics": matrix["nics"],
        "p2p_checked": bool(p2p), "p2p_reason": None,
        "p2p_ok": (not broken) if p2p else None, "p2p_broken": broken,
    }


def absent(reason):
    """The topology facts of a host whose topology could not be read, and why."""
    return {"present": False, "reason": reason, "gpu_count": 0, "nvlink": None, "links": [],
            "pcie_switch_groups": [], "host_bridge_groups": [], "affinity": [], "nics": {},
            "p2p_checked": False, "p2p_reason": None, "p2p_ok": None, "p2p_broken": []}


def _ask(binary, args, timeout):
    """(parsed matrix, None) or (None, why not) for one ``nvidia-smi topo`` call."""
    command = "nvidia-smi " + " ".join(args)
    rc, output = _run([binary, *args], timeout)
    if rc is None:
        return None, f"{command}: {output}"
    if rc != 0:
        return None, f"{command} failed (exit status {rc}): {output[-300:] if output else 'no output'}"
    try:
        return parse_matrix(output), None
    except TopologyError as exc:
        return None, f"cannot read the answer of {command}: {exc}; please report it with the driver version"


def topology_facts(binary, timeout=30):
    """Topology facts of the host whose nvidia-smi is ``binary`` (a path), each call bounded by
    ``timeout`` seconds. Never raises for a host state: a failed call is ``present: False`` + reason."""
    matrix, why = _ask(binary, MATRIX_ARGS, timeout)
    if matrix is None:
        return absent(why)
    try:
        facts = topology_from(matrix)
    except TopologyError as exc:
        return absent(f"cannot read the answer of nvidia-smi topo -m: {exc}; please report it with the "
                      "driver version")
    if facts["gpu_count"] < 2 or facts["nvlink"]:
        return facts
    answers = {}
    for kind, args in P2P_ARGS.items():
        answers[kind], why = _ask(binary, args, timeout)
        if why:
            facts["p2p_reason"] = why
            return facts
    try:
        return topology_from(matrix, answers)
    except TopologyError as exc:
        facts["p2p_reason"] = (f"cannot read the answer of nvidia-smi topo -p2p: {exc}; please report it "
                               "with the driver version")
        return facts


# verify's sentence about the interconnect (the "topology" check of module_utils/verify_report.py).

def _pairs(pairs, limit=4):
    words = [f"GPU{p['gpus'][0]}-GPU{p['gpus'][1]} "
             f"{'/'.join(sorted({p.get('read'), p.get('write')} - {None}))} ({p['link']})" for p in pairs]
    return ", ".join(words[:limit]) + (f" and {len(words) - limit} more" if len(words) > limit else "")


def _groups(groups):
    return "; ".join("GPU" + ",".join(str(gpu) for gpu in group) for group in groups) or "none"


def topology_check(gpu, p2p_required=True):
    """(status, detail, cause, fix) of a host's GPU interconnect from gpu_facts' ``topology``; cause and
    fix are None where the doctor's table says it."""
    topology = gpu.get("topology") or {}
    if not gpu.get("present"):
        return "skip", "no GPU to connect", None, None
    if not topology.get("present"):
        return "warn", f"GPU interconnect not read: {topology.get('reason')}", None, None
    count, links = topology.get("gpu_count") or 0, topology.get("links") or []
    if count < 2:
        return "ok", f"{count} GPU: no peer to reach", None, None
    if topology.get("nvlink"):
        codes = sorted({link["link"] for link in links})
        return "ok", f"{count} GPUs over NVLink ({', '.join(codes)})", None, None
    layout = (f"PCIe switches: {_groups(topology.get('pcie_switch_groups') or [])}; host bridges: "
              f"{_groups(topology.get('host_bridge_groups') or [])}")
    if topology.get("p2p_ok") is None:
        return ("warn", f"{count} GPUs over PCIe, peer-to-peer not read: {topology.get('p2p_reason')}",
                None, None)
    broken = topology.get("p2p_broken") or []
    if not broken:
        return ("ok", f"{count} GPUs over PCIe, peer-to-peer OK for all {len(links)} pairs; {layout}",
                None, None)
    cause = fix = None
    if all("GNS" in (pair.get("read"), pair.get("write")) for pair in broken):
        cause = "these GPUs do not support peer-to-peer (GNS: GPU not supported)"
        fix = ("no setting enables it: run tensor parallel with NCCL_P2P_DISABLE=1 (copies through host "
               "memory) or on GPUs that support peer-to-peer")
    return ("fail" if p2p_required else "warn",
            f"{len(broken)} of {len(links)} GPU pairs cannot use peer-to-peer over PCIe: {_pairs(broken)}; "
            f"{layout}", cause, fix)

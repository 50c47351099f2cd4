"""module_utils/gpu_topology.py: nvidia-smi's topology and peer-to-peer matrices, from a real capture (an
H200, tests/stand_ins/nvidia-smi-recordings/h200-topo-2026-12-01) and synthetic 8-GPU hosts in the same
format (8x RTX PRO 6000 under two PCIe switches, P2P fine or broken by ACS; an HGX H200 with NVLink and
NICs), through the nvidia-smi stand-in (a real process) where the calls matter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils import gpu_topology, nvidia_smi
from ansible.module_utils.bounded_run import RunTimeout
from ansible.module_utils.gpu_topology import (
    HOST_BRIDGE_LINKS,
    SWITCH_LINKS,
    TopologyError,
    absent,
    groups,
    link_meaning,
    parse_matrix,
    topology_check,
    topology_facts,
    topology_from,
)

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
STAND_IN = str(STAND_INS / "nvidia-smi")
RECORDINGS = STAND_INS / "nvidia-smi-recordings"
H200 = RECORDINGS / "h200-topo-2026-12-01"

MATRIX_LEGEND = {
    "X": "Self",
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": ("Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA "
             "node"),
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}
P2P_LEGEND = {"X": "Self", "OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
              "TNS": "Topology not supported", "NS": "Not supported", "U": "Unknown"}


def text(recording, call):
    return (RECORDINGS / recording / f"{call}.txt").read_text()


# parse_matrix ------------------------------------------------------------------------------------------

def test_the_captured_h200_matrix():
    assert parse_matrix(text(H200.name, "topo-m")) == {
        "columns": ["GPU0"], "rows": {"GPU0": ["X"]},
        "extra": {"GPU0": {"CPU Affinity": "0-15", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}},
        "legend": MATRIX_LEGEND, "nics": {}}


@pytest.mark.parametrize("call", ["topo-p2p-r", "topo-p2p-w"])
def test_the_captured_h200_p2p_matrices(call):
    assert parse_matrix(text(H200.name, call)) == {
        "columns": ["GPU0"], "rows": {"GPU0": ["X"]}, "extra": {"GPU0": {}}, "legend": P2P_LEGEND,
        "nics": {}}


@pytest.mark.parametrize("call", ["topo-m", "topo-p2p-r"])
def test_an_answer_stripped_of_its_leading_tab_reads_the_same(call):
    # nvidia_smi._run strips the answer, which takes the empty cell above the row names with it
    raw = text("rtx-pro-6000-x8-acs", call)
    assert parse_matrix(raw.strip()) == parse_matrix(raw)


def test_nics_are_columns_rows_and_a_legend_of_their_own():
    matrix = parse_matrix(text("h200-x8", "topo-m"))
    assert matrix["columns"] == [f"GPU{i}" for i in range(8)] + ["NIC0", "NIC1"]
    assert list(matrix["rows"]) == [f"GPU{i}" for i in range(8)] + ["NIC0", "NIC1"]
    assert matrix["rows"]["GPU5"] == ["NV18"] * 5 + ["X"] + ["NV18"] * 2 + ["SYS", "PXB"]
    assert matrix["rows"]["NIC0"] == ["PXB"] * 4 + ["SYS"] * 4 + ["X", "SYS"]
    assert matrix["extra"]["GPU5"] == {"CPU Affinity": "48-95,144-191", "NUMA Affinity": "1",
                                       "GPU NUMA ID": "N/A"}
    assert matrix["extra"]["NIC1"] == {}
    assert matrix["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert matrix["legend"] == MATRIX_LEGEND


def test_a_header_of_devices_only_and_rows_ended_by_the_legend():
    matrix = parse_matrix("\tGPU0\tGPU1\nGPU0\tX\tOK\nGPU1\tCNS\tX\nLegend:\n  OK = fine\n  weird line\n")
    assert matrix == {"columns": ["GPU0", "GPU1"], "rows": {"GPU0": ["X", "OK"], "GPU1": ["CNS", "X"]},
                      "extra": {"GPU0": {}, "GPU1": {}}, "legend": {"OK": "fine"}, "nics": {}}


def test_the_header_is_the_first_line_with_a_device_cell_between_tabs():
    matrix = parse_matrix("a note about GPU0 and NIC1\n\tGPU0\tNote\nGPU0\tX\tsee the manual\n")
    assert matrix["columns"] == ["GPU0"]
    assert matrix["extra"] == {"GPU0": {"Note": "see the manual"}}  # a cell may hold spaces


def test_the_legend_is_read_after_the_rows_only():
    matrix = parse_matrix("Warning = a line before the matrix\n\tGPU0\nGPU0\tX\n\nLegend:\n  X    = Self\n")
    assert matrix["legend"] == {"X": "Self"}


def test_rows_end_at_the_first_blank_line():
    matrix = parse_matrix("\tGPU0\nGPU0\tX\n\nGPU1\tX\n")
    assert matrix["rows"] == {"GPU0": ["X"]}


def test_a_legend_needs_spaces_around_the_equals_sign():
    matrix = parse_matrix("\tGPU0\nGPU0\tX\nLegend:\n  A = a\n  B=b\n  C  =  c c  \n  NIC0:mlx5_0\n")
    assert matrix["legend"] == {"A": "a", "C": "c c"}
    assert matrix["nics"] == {"NIC0": "mlx5_0"}


@pytest.mark.parametrize(("answer", "first"), [
    ("", "no output"),
    ("\n  \n", "no output"),
    ("\n No devices here \nGPU\tX\n", "No devices here"),
    ("NVIDIA-SMI has failed\n\tGPUx\n", "NVIDIA-SMI has failed"),
])
def test_an_answer_without_gpu_columns(answer, first):
    with pytest.raises(TopologyError) as caught:
        parse_matrix(answer)
    assert str(caught.value) == f"no GPU columns in the matrix (first line {first!r})"


def test_the_first_line_quoted_in_the_error_is_cut_at_200_characters():
    with pytest.raises(TopologyError) as caught:
        parse_matrix("x" * 250)
    assert str(caught.value) == f"no GPU columns in the matrix (first line {'x' * 200!r})"


@pytest.mark.parametrize("row", ["GPU0", "GPU0\tX", "CPU0\tX\tOK", "GPU\tX\tOK", "GPU0x\tX\tOK"])
def test_a_row_that_is_not_a_device_with_a_cell_per_column(row):
    with pytest.raises(TopologyError) as caught:
        parse_matrix(f"\tGPU0\tGPU1\n{row}\n")
    assert str(caught.value) == (f"unexpected matrix row {row!r} (want a device and 2 cells for "
                                 "GPU0, GPU1)")


def test_a_row_with_exactly_a_cell_per_column_is_enough():
    assert parse_matrix("\tGPU0\tGPU1\nGPU0\tX\tOK")["rows"] == {"GPU0": ["X", "OK"]}


# link_meaning and groups -------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "legend", "words"), [
    ("NV18", None, "NVLink (18 bonded links)"),
    ("NV4", {"NV4": "ignored"}, "NVLink (4 bonded links)"),
    ("PIX", None, "PCIe through at most a single PCIe bridge"),
    ("PXB", None, "PCIe through multiple PCIe bridges, without the PCIe host bridge"),
    ("PHB", None, "PCIe through a PCIe host bridge (typically the CPU)"),
    ("NODE", None, "PCIe through the interconnect between PCIe host bridges within a NUMA node"),
    ("SYS", {"SYS": "ignored"}, "PCIe through the SMP interconnect between NUMA nodes (e.g. QPI/UPI)"),
    ("X", MATRIX_LEGEND, "Self"),
    ("C2C", {"C2C": "chip to chip"}, "chip to chip"),
    ("C2C", {}, "unknown link code 'C2C'"),
    ("C2C", None, "unknown link code 'C2C'"),
    ("NVX", None, "unknown link code 'NVX'"),
])
def test_link_meaning(code, legend, words):
    assert link_meaning(code, legend) == words


def test_link_meaning_needs_no_legend():
    assert link_meaning("C2C") == "unknown link code 'C2C'"


def link(first, second, code):
    return {"gpus": [first, second], "link": code}


def test_groups_join_chains_and_leave_single_gpus_out():
    links = [link(5, 6, "PIX"), link(0, 1, "PIX"), link(1, 2, "PXB"), link(3, 4, "PHB"), link(2, 3, "SYS"),
             link(6, 7, "NODE")]
    assert groups(links, SWITCH_LINKS) == [[0, 1, 2], [5, 6]]
    assert groups(links, HOST_BRIDGE_LINKS) == [[0, 1, 2], [3, 4], [5, 6]]
    assert groups(links, ("SYS", "NODE")) == [[2, 3], [6, 7]]
    assert groups([], SWITCH_LINKS) == []


@pytest.mark.parametrize("order", [[(2, 3), (0, 3), (1, 2)], [(0, 3), (1, 2), (2, 3)],
                                   [(3, 4), (1, 2), (0, 4), (2, 4)], [(1, 3), (0, 2), (2, 3)]])
def test_groups_do_not_depend_on_the_order_of_the_links(order):
    expected = sorted({gpu for pair in order for gpu in pair})
    assert groups([link(a, b, "PIX") for a, b in order], SWITCH_LINKS) == [expected]


def test_groups_are_ordered_by_their_first_gpu():
    links = [link(6, 7, "PIX"), link(2, 9, "PIX"), link(0, 8, "PIX")]
    assert groups(links, SWITCH_LINKS) == [[0, 8], [2, 9], [6, 7]]


# topology_from ----------------------------------------------------------------------------------------

def matrices(recording):
    return (parse_matrix(text(recording, "topo-m")),
            {"read": parse_matrix(text(recording, "topo-p2p-r")),
             "write": parse_matrix(text(recording, "topo-p2p-w"))})


def test_eight_pcie_gpus_with_p2p_broken_by_acs():
    matrix, p2p = matrices("rtx-pro-6000-x8-acs")
    facts = topology_from(matrix, p2p)
    assert len(facts["links"]) == 28
    by_pair = {tuple(entry["gpus"]): entry for entry in facts["links"]}
    assert by_pair[(0, 1)] == {"gpus": [0, 1], "link": "PIX", "p2p_read": "OK", "p2p_write": "OK",
                               "path": "PCIe through at most a single PCIe bridge"}
    assert by_pair[(0, 4)]["link"] == "SYS"
    assert (by_pair[(0, 4)]["p2p_read"], by_pair[(0, 4)]["p2p_write"]) == ("NS", "NS")
    assert (by_pair[(4, 5)]["link"], by_pair[(4, 5)]["p2p_read"]) == ("PIX", "CNS")
    assert facts["p2p_broken"][0] == {"gpus": [0, 4], "link": "SYS", "read": "NS", "write": "NS"}
    assert facts["p2p_broken"][-1] == {"gpus": [6, 7], "link": "PIX", "read": "CNS", "write": "CNS"}
    assert len(facts["p2p_broken"]) == 22  # the 6 pairs of the first switch work
    assert facts["pcie_switch_groups"] == facts["host_bridge_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert facts["affinity"][4] == {"gpu": 4, "cpu_affinity": "32-63,96-127", "numa_affinity": "1",
                                    "gpu_numa_id": "N/A"}
    assert {key: facts[key] for key in ("present", "reason", "gpu_count", "nvlink", "nics", "p2p_checked",
                                        "p2p_reason", "p2p_ok")} == {
        "present": True, "reason": None, "gpu_count": 8, "nvlink": False, "nics": {}, "p2p_checked": True,
        "p2p_reason": None, "p2p_ok": False}


def test_eight_pcie_gpus_with_working_p2p():
    facts = topology_from(*matrices("rtx-pro-6000-x8"))
    assert (facts["p2p_checked"], facts["p2p_ok"], facts["p2p_broken"]) == (True, True, [])
    assert {entry["p2p_read"] for entry in facts["links"]} == {"OK"}
    assert {entry["p2p_write"] for entry in facts["links"]} == {"OK"}


def test_without_p2p_the_links_say_nothing_of_it():
    facts = topology_from(parse_matrix(text("rtx-pro-6000-x8", "topo-m")))
    assert facts["links"][0] == {"gpus": [0, 1], "link": "PIX",
                                 "path": "PCIe through at most a single PCIe bridge"}
    assert (facts["p2p_checked"], facts["p2p_ok"], facts["p2p_broken"]) == (False, None, [])
    assert topology_from(parse_matrix(text("rtx-pro-6000-x8", "topo-m")), {})["p2p_ok"] is None


def test_an_nvlink_host():
    facts = topology_from(parse_matrix(text("h200-x8", "topo-m")))
    assert facts["nvlink"] is True
    assert facts["gpu_count"] == 8  # NICs are not GPUs
    assert len(facts["links"]) == 28
    assert facts["links"][-1] == {"gpus": [6, 7], "link": "NV18", "path": "NVLink (18 bonded links)"}
    assert facts["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert [entry["gpu"] for entry in facts["affinity"]] == list(range(8))
    assert facts["pcie_switch_groups"] == facts["host_bridge_groups"] == []


def test_a_link_code_of_the_legend_is_explained_in_its_words():
    facts = topology_from(parse_matrix("\tGPU0\tGPU1\nGPU0\tX\tC2C\nGPU1\tC2C\tX\n\nLegend:\n\n"
                                       "  C2C  = Connection over a chip-to-chip link\n"))
    assert facts["links"] == [{"gpus": [0, 1], "link": "C2C", "path": "Connection over a chip-to-chip link"}]
    assert facts["nvlink"] is False
    assert facts["pcie_switch_groups"] == []


def test_the_captured_single_gpu():
    facts = topology_from(parse_matrix(text(H200.name, "topo-m")))
    assert facts == {"present": True, "reason": None, "gpu_count": 1, "nvlink": False, "links": [],
                     "pcie_switch_groups": [], "host_bridge_groups": [],
                     "affinity": [{"gpu": 0, "cpu_affinity": "0-15", "numa_affinity": "0",
                                   "gpu_numa_id": "N/A"}],
                     "nics": {}, "p2p_checked": False, "p2p_reason": None, "p2p_ok": None, "p2p_broken": []}


TWO = parse_matrix("\tGPU0\tGPU1\nGPU0\tX\tPHB\nGPU1\tPHB\tX\n")


def p2p_of(there, back):
    return parse_matrix(f"\tGPU0\tGPU1\nGPU0\tX\t{there}\nGPU1\t{back}\tX\n")


@pytest.mark.parametrize(("there", "back", "status"), [
    ("OK", "OK", "OK"), ("OK", "CNS", "CNS"), ("TNS", "OK", "TNS"), ("NS", "CNS", "NS")])
def test_a_pair_is_as_good_as_its_worse_direction(there, back, status):
    facts = topology_from(TWO, {"read": p2p_of(there, back), "write": p2p_of("OK", "OK")})
    assert facts["links"][0]["p2p_read"] == status
    assert facts["links"][0]["p2p_write"] == "OK"
    assert facts["p2p_ok"] is (status == "OK")
    assert facts["p2p_broken"] == ([] if status == "OK" else
                                   [{"gpus": [0, 1], "link": "PHB", "read": status, "write": "OK"}])


def test_a_pair_broken_only_for_writes_is_broken():
    facts = topology_from(TWO, {"read": p2p_of("OK", "OK"), "write": p2p_of("OK", "U")})
    assert facts["p2p_broken"] == [{"gpus": [0, 1], "link": "PHB", "read": "OK", "write": "U"}]


def test_a_p2p_matrix_that_lacks_a_pair():
    with pytest.raises(TopologyError) as caught:
        topology_from(TWO, {"read": p2p_of("OK", "OK"), "write": parse_matrix("\tGPU0\nGPU0\tX\n")})
    assert str(caught.value) == "the p2p write matrix has no GPU0/GPU1 pair"


def test_a_gpu_column_without_its_row():
    with pytest.raises(TopologyError) as caught:
        topology_from(parse_matrix("\tGPU0\tGPU1\nGPU0\tX\tPIX\n"))
    assert str(caught.value) == "the matrix has a GPU1 column but no GPU1 row"


def test_absent():
    assert absent("why") == {"present": False, "reason": "why", "gpu_count": 0, "nvlink": None, "links": [],
                             "pcie_switch_groups": [], "host_bridge_groups": [], "affinity": [], "nics": {},
                             "p2p_checked": False, "p2p_reason": None, "p2p_ok": None, "p2p_broken": []}


# topology_facts: the calls, through the stand-in nvidia-smi -------------------------------------------

@pytest.fixture
def host(monkeypatch, tmp_path):
    """A recording made of the named calls of a recording (or given texts); returns its facts."""
    def facts(files, timeout=30):
        for name, content in files.items():
            (tmp_path / f"{name}.txt").write_text(content)
        monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(tmp_path))
        return topology_facts(STAND_IN, timeout)
    return facts


def calls_of(recording, *calls):
    return {call: text(recording, call) for call in calls}


def test_a_pcie_host_reads_p2p_both_ways(host):
    facts = host(calls_of("rtx-pro-6000-x8-acs", "topo-m", "topo-p2p-r", "topo-p2p-w"))
    assert facts == topology_from(*matrices("rtx-pro-6000-x8-acs"))


def test_two_pcie_gpus_read_p2p(host):
    pair = "\tGPU0\tGPU1\nGPU0\tX\t{0}\nGPU1\t{0}\tX\n"
    facts = host({"topo-m": pair.format("PHB"), "topo-p2p-r": pair.format("OK"),
                  "topo-p2p-w": pair.format("OK")})
    assert (facts["gpu_count"], facts["p2p_checked"], facts["p2p_ok"]) == (2, True, True)
    assert facts["host_bridge_groups"] == [[0, 1]]


@pytest.mark.parametrize(("recording", "nvlink"), [(H200.name, False), ("h200-x8", True)])
def test_one_gpu_or_nvlink_asks_nothing_of_p2p(host, recording, nvlink):
    facts = host(calls_of(recording, "topo-m"))  # a p2p call would fail: the recording has none
    assert (facts["present"], facts["nvlink"], facts["p2p_checked"], facts["p2p_reason"]) == (
        True, nvlink, False, None)


@pytest.mark.parametrize(("missing", "flag"), [("topo-p2p-r", "r"), ("topo-p2p-w", "w")])
def test_a_p2p_call_that_fails_keeps_the_matrix(host, tmp_path, missing, flag):
    calls = calls_of("rtx-pro-6000-x8-acs", "topo-m", "topo-p2p-r", "topo-p2p-w")
    del calls[missing]
    facts = host(calls)
    assert facts == dict(topology_from(matrices("rtx-pro-6000-x8-acs")[0]), p2p_reason=(
        f"nvidia-smi topo -p2p {flag} failed (exit status 98): stand-in nvidia-smi: {tmp_path} has no "
        f"{missing}.txt"))


def test_a_p2p_answer_without_a_pair(host):
    calls = calls_of("rtx-pro-6000-x8-acs", "topo-m", "topo-p2p-r")
    calls["topo-p2p-w"] = text(H200.name, "topo-p2p-w")
    facts = host(calls)
    assert facts["p2p_checked"] is False
    assert facts["present"] is True
    assert facts["p2p_reason"] == ("cannot read the answer of nvidia-smi topo -p2p: the p2p write matrix has "
                                   "no GPU0/GPU1 pair; please report it with the driver version")


def test_a_p2p_answer_that_is_not_a_matrix(host):
    calls = calls_of("rtx-pro-6000-x8-acs", "topo-m", "topo-p2p-w")
    calls["topo-p2p-r"] = "something else\n"
    assert host(calls)["p2p_reason"] == (
        "cannot read the answer of nvidia-smi topo -p2p r: no GPU columns in the matrix (first line "
        "'something else'); please report it with the driver version")


def test_no_topology_answer(host, tmp_path):
    assert host({}) == absent(f"nvidia-smi topo -m failed (exit status 98): stand-in nvidia-smi: {tmp_path} "
                              "has no topo-m.txt")


def test_a_matrix_that_cannot_be_read(host):
    assert host({"topo-m": "\tGPU0\tGPU1\nGPU0\tX\tPIX\n"})["reason"] == (
        "cannot read the answer of nvidia-smi topo -m: the matrix has a GPU1 column but no GPU1 row; please "
        "report it with the driver version")
    assert host({"topo-m": "garbage"})["reason"] == (
        "cannot read the answer of nvidia-smi topo -m: no GPU columns in the matrix (first line 'garbage'); "
        "please report it with the driver version")


def smi(tmp_path, script):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def test_a_failed_call_without_output(tmp_path):
    assert topology_facts(smi(tmp_path, "exit 3\n"))["reason"] == (
        "nvidia-smi topo -m failed (exit status 3): no output")


def test_a_failed_call_keeps_the_last_300_characters(tmp_path):
    facts = topology_facts(smi(tmp_path, "printf 'a%.0s' $(seq 1 400); printf 'z'; exit 4\n"))
    assert facts["reason"] == "nvidia-smi topo -m failed (exit status 4): " + "a" * 299 + "z"


def test_every_call_is_bounded(tmp_path, monkeypatch):
    asked = []

    def hung(argv, timeout, **kwargs):
        asked.append((argv, timeout))
        raise RunTimeout(argv, timeout, b"", b"", None)

    monkeypatch.setattr(nvidia_smi, "run_bounded", hung)
    binary = smi(tmp_path, "exit 0\n")
    assert topology_facts(binary, timeout=7)["reason"] == (
        f"nvidia-smi topo -m: {binary} did not answer within 7 s (a hung GPU or driver? check dmesg for Xid "
        "errors)")
    assert asked == [([binary, "topo", "-m"], 7)]
    asked.clear()
    topology_facts(binary)
    assert asked == [([binary, "topo", "-m"], 30)]


def test_a_hung_p2p_call_is_bounded(tmp_path, monkeypatch):
    real = nvidia_smi.run_bounded

    def p2p_hangs(argv, timeout, **kwargs):
        if "-p2p" in argv:
            raise RunTimeout(argv, timeout, b"", b"", "left behind")
        return real(argv, timeout, **kwargs)

    monkeypatch.setattr(nvidia_smi, "run_bounded", p2p_hangs)
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / "rtx-pro-6000-x8-acs"))
    facts = topology_facts(STAND_IN, timeout=5)
    assert facts["present"] is True
    assert facts["p2p_reason"] == (f"nvidia-smi topo -p2p r: {STAND_IN} did not answer within 5 s (a hung "
                                   "GPU or driver? check dmesg for Xid errors); left behind")


def test_the_calls_are_the_documented_ones():
    assert gpu_topology.MATRIX_ARGS == ("topo", "-m")
    assert gpu_topology.P2P_ARGS == {"read": ("topo", "-p2p", "r"), "write": ("topo", "-p2p", "w")}
    assert list(gpu_topology.P2P_STATUSES) == list(P2P_LEGEND)[1:]  # the captured legend, less Self


# topology_check: verify's sentence ---------------------------------------------------------------------

def check_of(topology, present=True, **kwargs):
    return topology_check({"present": present, "topology": topology}, **kwargs)


def test_check_without_a_gpu_or_a_matrix():
    assert check_of({}, present=False) == ("skip", "no GPU to connect", None, None)
    assert topology_check({"present": True}) == ("warn", "GPU interconnect not read: None", None, None)
    assert check_of(absent("nvidia-smi topo -m failed")) == (
        "warn", "GPU interconnect not read: nvidia-smi topo -m failed", None, None)


def test_check_of_one_gpu():
    assert check_of(topology_from(parse_matrix(text(H200.name, "topo-m")))) == (
        "ok", "1 GPU: no peer to reach", None, None)
    assert check_of({"present": True}) == ("ok", "0 GPU: no peer to reach", None, None)


def test_check_of_nvlink():
    facts = topology_from(parse_matrix(text("h200-x8", "topo-m")))
    assert check_of(facts) == ("ok", "8 GPUs over NVLink (NV18)", None, None)
    two = {"present": True, "gpu_count": 3, "nvlink": True,
           "links": [link(0, 1, "NV4"), link(0, 2, "NV12"), link(1, 2, "NV4")]}
    assert check_of(two) == ("ok", "3 GPUs over NVLink (NV12, NV4)", None, None)


def test_check_of_pcie_with_working_p2p():
    assert check_of(topology_from(*matrices("rtx-pro-6000-x8"))) == (
        "ok", "8 GPUs over PCIe, peer-to-peer OK for all 28 pairs; PCIe switches: GPU0,1,2,3; GPU4,5,6,7; "
              "host bridges: GPU0,1,2,3; GPU4,5,6,7", None, None)
    bare = {"present": True, "gpu_count": 2, "nvlink": False, "links": [link(0, 1, "SYS")], "p2p_ok": True}
    assert check_of(bare) == ("ok", "2 GPUs over PCIe, peer-to-peer OK for all 1 pairs; PCIe switches: none; "
                                    "host bridges: none", None, None)


def test_check_of_pcie_without_p2p_answers():
    facts = dict(topology_from(matrices("rtx-pro-6000-x8")[0]), p2p_reason="nvidia-smi topo -p2p r failed")
    assert check_of(facts) == (
        "warn", "8 GPUs over PCIe, peer-to-peer not read: nvidia-smi topo -p2p r failed", None, None)


ACS_DETAIL = ("22 of 28 GPU pairs cannot use peer-to-peer over PCIe: GPU0-GPU4 NS (SYS), GPU0-GPU5 NS (SYS), "
              "GPU0-GPU6 NS (SYS), GPU0-GPU7 NS (SYS) and 18 more; PCIe switches: GPU0,1,2,3; GPU4,5,6,7; "
              "host bridges: GPU0,1,2,3; GPU4,5,6,7")


def test_check_of_pcie_with_p2p_broken_by_acs():
    facts = topology_from(*matrices("rtx-pro-6000-x8-acs"))
    assert check_of(facts) == ("fail", ACS_DETAIL, None, None)  # the doctor's table says cause and fix
    assert check_of(facts, p2p_required=False) == ("warn", ACS_DETAIL, None, None)


def broken(*pairs):
    return {"present": True, "gpu_count": 4, "nvlink": False, "p2p_ok": False,
            "links": [link(0, 1, "PIX")] * 6, "p2p_broken": list(pairs)}


def test_the_broken_pairs_are_named_four_at_most():
    pairs = [{"gpus": [0, n], "link": "PIX", "read": "CNS", "write": "NS"} for n in range(1, 6)]
    assert check_of(broken(*pairs[:4]))[1].startswith(
        "4 of 6 GPU pairs cannot use peer-to-peer over PCIe: GPU0-GPU1 CNS/NS (PIX), GPU0-GPU2 CNS/NS (PIX), "
        "GPU0-GPU3 CNS/NS (PIX), GPU0-GPU4 CNS/NS (PIX); PCIe switches: none")
    assert check_of(broken(*pairs))[1].startswith(
        "5 of 6 GPU pairs cannot use peer-to-peer over PCIe: GPU0-GPU1 CNS/NS (PIX), GPU0-GPU2 CNS/NS (PIX), "
        "GPU0-GPU3 CNS/NS (PIX), GPU0-GPU4 CNS/NS (PIX) and 1 more;")
    assert check_of(broken({"gpus": [2, 3], "link": "SYS", "read": "TNS"}))[1].startswith(
        "1 of 6 GPU pairs cannot use peer-to-peer over PCIe: GPU2-GPU3 TNS (SYS);")


def test_gpus_that_cannot_do_p2p_at_all_get_their_own_cause_and_fix():
    gns = broken({"gpus": [0, 1], "link": "PIX", "read": "GNS", "write": "OK"},
                 {"gpus": [0, 2], "link": "PIX", "read": "OK", "write": "GNS"})
    status, _, cause, fix = check_of(gns)
    assert status == "fail"
    assert cause == "these GPUs do not support peer-to-peer (GNS: GPU not supported)"
    assert fix == ("no setting enables it: run tensor parallel with NCCL_P2P_DISABLE=1 (copies through host "
                   "memory) or on GPUs that support peer-to-peer")
    mixed = broken({"gpus": [0, 1], "link": "PIX", "read": "GNS", "write": "GNS"},
                   {"gpus": [0, 2], "link": "PIX", "read": "CNS", "write": "CNS"})
    assert check_of(mixed)[2:] == (None, None)

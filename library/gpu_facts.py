#!/usr/bin/python
"""Ansible module: NVIDIA GPUs, driver versions and the loaded kernel module (read-only)."""

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Report NVIDIA GPUs, driver and CUDA driver versions, and kernel module state
description:
  - Queries nvidia-smi for every GPU (index, name, UUID, compute capability, memory, PCI bus id) and the
    driver and CUDA driver versions, and reads the version of the loaded C(nvidia) kernel module.
  - A host without nvidia-smi, without a loaded driver, or whose driver sees no GPU is a normal answer,
    C(present=false) with a C(reason), not a failure.
  - Compares the loaded kernel module with the user-space driver; a difference (the state after a driver
    upgrade without reboot, where nvidia-smi reports "Driver/library version mismatch") sets
    C(reload_required).
  - Reads how the GPUs reach each other (C(nvidia-smi topo -m)), the link of every GPU pair (NVLink
    C(NV#), or the PCIe path C(PIX), C(PXB), C(PHB), C(NODE), C(SYS)), which GPUs share a PCIe switch or a
    host bridge, and their CPU and NUMA affinity. On hosts with several GPUs and no NVLink it also reads
    the driver's peer-to-peer read and write status of every pair (C(nvidia-smi topo -p2p r) and C(w));
    tensor parallel over PCIe needs it, and ACS or the IOMMU redirecting peer traffic breaks it.
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  nvidia_smi:
    description:
      - Path of nvidia-smi; a bare name is looked up on the remote PATH. Default is nvidia-smi on the
        remote PATH, then the usual install directories.
    type: path
  timeout:
    description:
      - Seconds each nvidia-smi call may take; a hung GPU or driver gives C(present=false) with a reason.
    type: int
    default: 30
  kernel_module_version_files:
    description:
      - Files to read the loaded module's version from, first readable wins.
    type: list
    elements: path
    default: [/sys/module/nvidia/version, /proc/driver/nvidia/version]
  topology:
    description:
      - Read the GPU interconnect and peer-to-peer status (C(topology) in the result); each call is
        bounded by O(timeout). V(false) skips the calls and returns C(topology.present=false).
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check mode; it changes nothing in either mode, so the answer is the same.
    support: full
  diff_mode:
    description: Returns no diff; it changes nothing.
    support: none
notes:
  - Supports check mode; the result is the same.
  - Capabilities are strings (V("12.0")), never floats.
seealso:
  - module: torch_cuda_archs
  - module: sgl_kernel_variants
"""

EXAMPLES = r"""
- name: Read GPU facts
  gpu_facts:
  register: gpu

- name: Stop when the host needs a reboot after a driver upgrade
  ansible.builtin.assert:
    that: not gpu.reload_required
    fail_msg: "{{ gpu.reload_reason }}"

- name: Stop when GPUs of this host cannot reach each other peer-to-peer
  ansible.builtin.assert:
    that: gpu.topology.p2p_ok is not false
    fail_msg: "GPU pairs without P2P: {{ gpu.topology.p2p_broken }}"

- name: Check torch against every capability on this host
  torch_cuda_archs:
    python: /opt/sglang/venv/bin/python
    require: "{{ gpu.capabilities }}"
  when: gpu.present
"""

RETURN = r"""
present:
  description: Whether nvidia-smi answered and listed at least one GPU.
  returned: always
  type: bool
reason:
  description: Why C(present) is false (no nvidia-smi, driver not loaded, no devices, mismatch, hang).
  returned: always
  type: str
  sample: "nvidia-smi not found on PATH (no NVIDIA driver installed)"
gpus:
  description: One entry per GPU, in nvidia-smi index order. C(capability) is null on drivers before 510.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: nvidia-smi's index.
      type: int
    name:
      description: Product name.
      type: str
    uuid:
      description: GPU UUID.
      type: str
    capability:
      description: Compute capability, a string; null on drivers before 510.
      type: str
    memory_total_mib:
      description: Total memory in MiB, or null when not reported.
      type: int
    pci_bus_id:
      description: PCI bus id.
      type: str
    driver_version:
      description: Driver version nvidia-smi reports for this GPU.
      type: str
  sample:
    - {index: 0, name: NVIDIA H200, uuid: GPU-3b2c..., capability: "9.0", memory_total_mib: 143771,
       pci_bus_id: "00000000:18:00.0", driver_version: 580.95.05}
capabilities:
  description: Sorted unique compute capabilities of the GPUs.
  returned: always
  type: list
  elements: str
  sample: ["9.0"]
nvidia_smi:
  description: The nvidia-smi that was run, or null.
  returned: always
  type: str
driver_version:
  description: Driver version as nvidia-smi reports it (the running driver).
  returned: always
  type: str
  sample: 580.95.05
user_space_driver_version:
  description: Version of the user-space tools (nvidia-smi banner, or the NVML library on a mismatch).
  returned: always
  type: str
cuda_driver_version:
  description: Newest CUDA version the driver supports (the "CUDA Version" of nvidia-smi).
  returned: always
  type: str
  sample: "13.0"
kernel_module_version:
  description: Version of the loaded nvidia kernel module; null when none is loaded.
  returned: always
  type: str
kernel_module_version_file:
  description: File the module version was read from.
  returned: always
  type: str
kernel_module_mismatch:
  description: Whether the loaded module differs from the user-space driver; null when either is unknown.
  returned: always
  type: bool
reload_required:
  description: True when the nvidia modules must be reloaded (or the host rebooted) to use the GPUs.
  returned: always
  type: bool
reload_reason:
  description: Why a reload is required, else null.
  returned: always
  type: str
topology:
  description: How the GPUs reach each other, from C(nvidia-smi topo -m) and C(topo -p2p r|w).
  returned: always
  type: dict
  contains:
    present:
      description: Whether the matrix was read (false without GPUs, with O(topology=false), or when the
        call failed; C(reason) says which).
      type: bool
    reason:
      description: Why C(present) is false, else null.
      type: str
    gpu_count:
      description: GPUs in the matrix.
      type: int
    nvlink:
      description: Whether any GPU pair is linked by NVLink; null when not read.
      type: bool
    links:
      description: >-
        One entry per GPU pair (C(gpus) [i, j] with i < j): C(link), nvidia-smi's code (C(NV18), C(PIX),
        C(PXB), C(PHB), C(NODE), C(SYS)), C(path) in words, and when peer-to-peer was read C(p2p_read)
        and C(p2p_write) (C(OK), C(CNS) chipset not supported, C(GNS) GPU not supported, C(TNS)
        topology not supported, C(NS) not supported, C(U) unknown; the worse of the two directions).
      type: list
      elements: dict
      sample:
        - {gpus: [0, 4], link: SYS, path: "PCIe through the SMP interconnect between NUMA nodes (e.g.
           QPI/UPI)", p2p_read: NS, p2p_write: NS}
    pcie_switch_groups:
      description: GPUs joined by C(PIX)/C(PXB) links (behind one PCIe switch tree), groups of two or
        more; an NVLink pair's PCIe path is not shown by C(topo -m), so NVLink hosts list none.
      type: list
      elements: list
      sample: [[0, 1, 2, 3], [4, 5, 6, 7]]
    host_bridge_groups:
      description: GPUs joined by C(PIX)/C(PXB)/C(PHB) links (behind one PCIe host bridge / root complex).
      type: list
      elements: list
    affinity:
      description: Per GPU, the matrix's affinity columns (C(cpu_affinity), C(numa_affinity), C(gpu_numa_id)).
      type: list
      elements: dict
      sample: [{gpu: 0, cpu_affinity: "0-15", numa_affinity: "0", gpu_numa_id: N/A}]
    nics:
      description: The NICs of the matrix's NIC legend (C(NIC0) to C(mlx5_0)).
      type: dict
    p2p_checked:
      description: Whether peer-to-peer was read (several GPUs, no NVLink, both calls answered).
      type: bool
    p2p_reason:
      description: Why peer-to-peer could not be read on a host that needs it, else null.
      type: str
    p2p_ok:
      description: Whether every pair can read and write peer-to-peer; null when not checked.
      type: bool
    p2p_broken:
      description: The pairs that cannot (C(gpus), C(link), C(read), C(write)).
      type: list
      elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_topology import absent, topology_facts
from ansible.module_utils.nvidia_smi import KERNEL_MODULE_VERSION_FILES, NvidiaSmiError, gpu_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "path"},
            "timeout": {"type": "int", "default": 30},
            "kernel_module_version_files": {"type": "list", "elements": "path",
                                            "default": list(KERNEL_MODULE_VERSION_FILES)},
            "topology": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be a positive number of seconds, got {params['timeout']}")
    try:
        facts = gpu_facts(params["nvidia_smi"], params["timeout"], params["kernel_module_version_files"])
        if not facts["present"]:
            facts["topology"] = absent(f"no GPU: {facts['reason']}")
        elif not params["topology"]:
            facts["topology"] = absent("not read (topology=false)")
        else:
            facts["topology"] = topology_facts(facts["nvidia_smi"], params["timeout"])
    except NvidiaSmiError as exc:
        module.fail_json(msg=f"{exc}; please report this output with the driver version")
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"gpu_facts failed unexpectedly: {type(exc).__name__}: {exc}")
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()

"""Arch names and the rules for which code runs on which GPU (module_utils/cuda_arch)."""

import pytest
from ansible.module_utils.cuda_arch import (
    KNOWN_CAPABILITIES,
    Arch,
    ArchError,
    cuda_requirements,
    describe_archs,
    describe_targets,
    format_arch,
    min_cuda_for_target,
    parse_arch,
    parse_capabilities,
    parse_capability,
    parse_requirements,
    ptx_runs_on,
    runs_on,
    sass_runs_on,
    sorted_archs,
    targets_for,
)


@pytest.mark.parametrize(("text", "kind", "arch"), [
    ("12.0", None, Arch(12, 0, "")),
    ("120", None, Arch(12, 0, "")),
    ("9.0a", None, Arch(9, 0, "a")),
    ("sm_120a", "sm", Arch(12, 0, "a")),
    ("SM_90A", "sm", Arch(9, 0, "a")),
    ("sm90", "sm", Arch(9, 0, "")),
    ("compute_120f", "compute", Arch(12, 0, "f")),
    ("lto_100f", "lto", Arch(10, 0, "f")),
    (" sm_121a ", "sm", Arch(12, 1, "a")),
    ("75", None, Arch(7, 5, "")),
])
def test_parse_arch_accepts_every_documented_form(text, kind, arch):
    assert parse_arch(text) == (kind, arch)


@pytest.mark.parametrize("text", ["1", "sm_1", "1200", "sm_120x", "", "gfx90a", "sm_120af", "12.0.1",
                                  "compute-90", "12,0"])
def test_parse_arch_rejects_other_text_with_the_accepted_forms(text):
    with pytest.raises(ArchError, match=r'is not a CUDA architecture; use a capability like "12.0"'):
        parse_arch(text)


@pytest.mark.parametrize("value", [None, 120, True, ["12.0"]])
def test_parse_arch_rejects_non_strings(value):
    with pytest.raises(ArchError, match="must be a string"):
        parse_arch(value)


@pytest.mark.parametrize(("text", "capability"), [
    ("12.0", "12.0"), ("120", "12.0"), ("sm_120", "12.0"), ("compute_90", "9.0"), ("10.3", "10.3"),
    ("121", "12.1"),
])
def test_parse_capability_canonical_form(text, capability):
    assert parse_capability(text) == capability


def test_parse_capability_errors_say_what_to_write():
    with pytest.raises(ArchError, match=r'write it as a quoted string, e.g. "12.0"'):
        parse_capability(12.0)
    with pytest.raises(ArchError, match=r'a GPU capability has no suffix \(use "12.0"\)'):
        parse_capability("sm_120a")
    with pytest.raises(ArchError, match=r"not the compute capability of any known NVIDIA GPU; known: 5\.0"):
        parse_capability("13.0")
    with pytest.raises(ArchError, match=r"'12' is not the compute capability of any known NVIDIA GPU"):
        parse_capability("12")  # sm_12 (CUDA 1.2), not 12.0: numeric forms need the minor digit
    assert parse_capability("13.0", known_only=False) == "13.0"


def test_parse_capabilities_canonical_unique_in_order_and_errors_name_the_option():
    assert parse_capabilities(["12.0", "120", "sm_90", "12.0"]) == ["12.0", "9.0"]
    assert parse_capabilities(None) == []
    with pytest.raises(ArchError, match=r"^require: capability 12\.0 is a number; write it as a quoted"):
        parse_capabilities([12.0])
    with pytest.raises(ArchError, match=r"^capability: 'blackwell' is not a CUDA architecture"):
        parse_capabilities(["blackwell"], param="capability")
    with pytest.raises(ArchError, match=r"^require: '9\.9' is not the compute capability of any known"):
        parse_capabilities(["9.9"])
    assert parse_capabilities(["9.9"], known_only=False) == ["9.9"]


def test_parse_requirements_for_a_module():
    # Strict about the form, lenient about GPUs newer than the list: those only warn.
    assert parse_requirements([]) == ([], False, [])
    assert parse_requirements(["12.0", "120"]) == (["12.0"], True, [])
    assert parse_requirements(["12.0"], fail_on_missing=False) == (["12.0"], False, [])
    capabilities, fail_on_missing, warnings = parse_requirements(["12.2", "9.0"])
    assert (capabilities, fail_on_missing) == (["12.2", "9.0"], True)
    assert warnings == [
        "capability 12.2 is not one of the known NVIDIA GPU capabilities (" + ", ".join(KNOWN_CAPABILITIES)
        + "); it was rated with the same rules, which a new architecture may not follow"]
    with pytest.raises(ArchError, match=r"^require: 'sm_12x' is not a CUDA architecture"):
        parse_requirements(["sm_12x"])


def test_describe_archs():
    assert describe_archs(["sm_80", "sm_100a"], ["compute_100a"]) == "sm_80, sm_100a, compute_100a"
    assert describe_archs([], [], ["lto_90"]) == "lto_90 (LTO-IR, runs only after a device link)"
    assert describe_archs([], []) == "no device code"


@pytest.mark.parametrize(("capability", "targets"), [
    ("8.6", ["sm_86", "compute_86"]),
    ("9.0", ["sm_90a", "sm_90", "compute_90"]),
    ("10.3", ["sm_100f", "sm_103a", "sm_103", "compute_103"]),
    ("12.0", ["sm_120f", "sm_120a", "sm_120", "compute_120"]),
    ("12.1", ["sm_120f", "sm_121a", "sm_121", "compute_121"]),
    ("13.0", ["sm_130f", "sm_130a", "sm_130", "compute_130"]),  # unknown: named after itself
    ("13.5", ["sm_135f", "sm_135a", "sm_135", "compute_135"]),  # no known x.0 in its family either
])
def test_targets_for_all_run_on_the_capability(capability, targets):
    assert targets_for(capability) == targets
    for target in targets:
        sass, ptx = ([target], []) if target.startswith("sm_") else ([], [target])
        assert runs_on(sass, ptx, capability), target


def test_describe_targets():
    assert describe_targets("12.1") == "sm_120f, sm_121a, sm_121 or compute_121 PTX"
    assert describe_targets("7.5") == "sm_75 or compute_75 PTX"


def test_sorted_archs_is_numeric_unique_and_orders_plain_a_f():
    names = ["sm_120a", "sm_90", "sm_100f", "sm_90a", "sm_100", "sm_90", "sm_75", "sm_120"]
    assert sorted_archs(names) == ["sm_75", "sm_90", "sm_90a", "sm_100", "sm_100f", "sm_120", "sm_120a"]
    assert sorted_archs(["compute_120f", "compute_90"]) == ["compute_90", "compute_120f"]


def test_format_arch_round_trips():
    for name in ("sm_90a", "compute_120f", "lto_100", "sm_121a"):
        kind, arch = parse_arch(name)
        assert format_arch(arch, kind) == name


@pytest.mark.parametrize(("arch", "capability", "expected"), [
    ("sm_80", "8.6", True),     # plain: same major, newer minor
    ("sm_86", "8.0", False),    # ... never an older minor
    ("sm_80", "9.0", False),    # ... never another major
    ("sm_90", "9.0", True),
    ("sm_100", "10.3", True),
    ("sm_100", "11.0", False),
    ("sm_120", "12.1", True),
    ("sm_90a", "9.0", True),    # arch-specific: exactly that capability
    ("sm_90a", "10.0", False),
    ("sm_100a", "10.3", False),
    ("sm_120a", "12.1", False),
    ("sm_121a", "12.0", False),
    ("sm_100f", "10.0", True),  # family: members with the same major and minor >= the family's
    ("sm_100f", "10.3", True),
    ("sm_103f", "10.0", False),
    ("sm_100f", "12.0", False),
    ("sm_120f", "12.0", True),
    ("sm_120f", "12.1", True),
])
def test_sass_runs_on(arch, capability, expected):
    assert sass_runs_on(arch, capability) is expected


@pytest.mark.parametrize(("family", "members"), [
    ("sm_100f", ["10.0", "10.3"]), ("sm_103f", ["10.3"]), ("sm_110f", ["11.0"]),
    ("sm_120f", ["12.0", "12.1"]), ("compute_120f", ["12.0", "12.1"]),
])
def test_family_rule_is_exact_on_every_known_capability(family, members):
    # NVIDIA's family lists; "same major, minor >=" matches them only because 10.1 is not a known device.
    rule = sass_runs_on if family.startswith("sm_") else ptx_runs_on
    assert [capability for capability in KNOWN_CAPABILITIES if rule(family, capability)] == members


def test_sm_101_is_a_binary_arch_but_no_known_device():
    assert parse_arch("sm_101a") == ("sm", Arch(10, 1, "a"))
    with pytest.raises(ArchError, match="not the compute capability of any known NVIDIA GPU"):
        parse_capability("10.1")


@pytest.mark.parametrize(("arch", "capability", "expected"), [
    ("compute_90", "12.0", True),     # plain PTX: any newer capability, across majors (JIT)
    ("compute_75", "9.0", True),
    ("compute_120", "9.0", False),
    ("compute_100", "10.3", True),
    ("compute_90a", "9.0", True),     # arch-specific PTX: exactly that capability
    ("compute_90a", "10.0", False),
    ("compute_120a", "12.1", False),
    ("compute_120f", "12.1", True),   # family PTX: the family only
    ("compute_100f", "10.3", True),
    ("compute_100f", "12.0", False),
])
def test_ptx_runs_on(arch, capability, expected):
    assert ptx_runs_on(arch, capability) is expected


@pytest.mark.parametrize(("sass", "ptx", "capability", "expected"), [
    (["sm_90"], ["compute_80"], "9.0", "sass"),            # a cubin wins over JIT when both work
    (["sm_90"], ["compute_80"], "12.0", "ptx-jit"),
    (["sm_80", "sm_90", "sm_100a"], [], "12.0", False),    # the sgl-kernel sm100/ miss on Blackwell 12.0
    (["sm_100a"], ["compute_100a"], "10.3", False),
    (["sm_100f"], [], "10.3", "sass"),
    ([], ["compute_120f"], "12.1", "ptx-jit"),
    ([], [], "9.0", False),
])
def test_runs_on_prefers_sass_then_ptx(sass, ptx, capability, expected):
    assert runs_on(sass, ptx, capability) == expected


def test_parse_capability_messages_in_full():
    with pytest.raises(ArchError) as caught:
        parse_capability(12.1)
    assert str(caught.value) == ('capability 12.1 is a number; write it as a quoted string, e.g. "12.1" '
                                 "(YAML turns 12.10 and 12.1 into the same float)")
    with pytest.raises(ArchError) as caught:
        parse_capability("9.9")
    assert str(caught.value) == ("'9.9' is not the compute capability of any known NVIDIA GPU; known: 5.0, "
                                 "5.2, 5.3, 6.0, 6.1, 6.2, 7.0, 7.2, 7.5, 8.0, 8.6, 8.7, 8.8, 8.9, 9.0, "
                                 "10.0, 10.3, 11.0, 12.0, 12.1")


@pytest.mark.parametrize(("target", "message"), [
    ("sm_80a", "`a` targets exist for capabilities 9.0 and later (use sm_80)"),
    ("compute_89a", "`a` targets exist for capabilities 9.0 and later (use sm_89)"),
    ("sm_90f", "`f` targets exist for capabilities 10.0 and later (use sm_90)"),
    ("sm_75f", "`f` targets exist for capabilities 10.0 and later (use sm_75)"),
])
def test_a_target_that_does_not_exist_says_which_do(target, message):
    with pytest.raises(ArchError) as caught:
        min_cuda_for_target(target)
    assert str(caught.value) == f"{target!r} is not a CUDA target: {message}"


@pytest.mark.parametrize(("capability", "max_major"), [
    ("7.2", 12), ("7.5", None), ("8.0", None), ("5.0", 12)])
def test_cuda_13_drops_capabilities_below_turing(capability, max_major):
    assert cuda_requirements([capability])["max_major"] == max_major

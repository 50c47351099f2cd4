"""module_utils/inventory_rules: the exact answer for every argument-spec type, list choices, nested
options, capability spelling and how host checks combine (cases/inventory_rules.yml covers the typical
mistakes by message fragments; this pins every branch and message)."""

from __future__ import annotations

import pytest
from ansible.module_utils.inventory_rules import (
    check_capability,
    check_host_variables,
    check_value,
    known_options,
)

QUOTE = " so it is not read as a number or boolean"
WHEN = (" without quotes (a quoted string is true in a `when:`, even \"false\"); on the command line "
        "-e NAME=true passes a string: give JSON, -e '{\"NAME\": true}'")
NESTED = {"type": "dict", "options": {"port": {"type": "int"},
                                      "nested": {"type": "dict", "options": {"on": {"type": "bool"}}}}}

TYPE_CASES = [
    ({"type": "bool"}, True, []),
    ({"type": "bool"}, False, []),
    ({"type": "bool"}, " On ", [f"v is the string ' On ', not a boolean; write true{WHEN}"]),
    ({"type": "bool"}, "N", [f"v is the string 'N', not a boolean; write false{WHEN}"]),
    ({"type": "bool"}, "0", [f"v is the string '0', not a boolean; write false{WHEN}"]),
    ({"type": "bool"}, "y", [f"v is the string 'y', not a boolean; write true{WHEN}"]),
    ({"type": "bool"}, "1", [f"v is the string '1', not a boolean; write true{WHEN}"]),
    ({"type": "bool"}, "True", [f"v is the string 'True', not a boolean; write true{WHEN}"]),
    ({"type": "bool"}, "yes", [f"v is the string 'yes', not a boolean; write true{WHEN}"]),
    ({"type": "bool"}, "no", [f"v is the string 'no', not a boolean; write false{WHEN}"]),
    ({"type": "bool"}, "off", [f"v is the string 'off', not a boolean; write false{WHEN}"]),
    ({"type": "bool"}, 1, ["v must be a boolean (true/false), got int 1"]),
    ({"type": "bool"}, "maybe", ["v must be a boolean (true/false), got str 'maybe'"]),
    ({}, "x", []),
    ({}, 3, [f"v must be a string, got int 3; quote it in YAML (e.g. \"3\"){QUOTE}"]),
    ({"type": "str"}, False,
     [f"v must be a string, got bool False; quote it in YAML (e.g. \"False\"){QUOTE}"]),
    ({"type": "path"}, "/a", []),
    ({"type": "path"}, 1.5, [f"v must be a string, got float 1.5; quote it in YAML (e.g. \"1.5\"){QUOTE}"]),
    ({"type": "int"}, 3, []),
    ({"type": "int"}, True, ["v must be an integer, got bool True"]),
    ({"type": "int"}, 2.0, ["v must be an integer, got float 2.0"]),
    ({"type": "int"}, "3", ["v must be an integer, got str '3'"]),
    ({"type": "float"}, 1, []),
    ({"type": "float"}, 1.5, []),
    ({"type": "float"}, True, ["v must be a number, got bool True"]),
    ({"type": "float"}, "1.5", ["v must be a number, got str '1.5'"]),
    ({"type": "list"}, [], []),
    ({"type": "list"}, [1, "a", None], []),  # elements default to raw
    ({"type": "list"}, "a", ["v must be a list, got str 'a'"]),
    ({"type": "list"}, {"a": 1}, ["v must be a list, got dict {'a': 1}"]),
    ({"type": "dict"}, {}, []),
    ({"type": "dict"}, {"anything": 1}, []),
    ({"type": "dict"}, ["a"], ["v must be a mapping, got list ['a']"]),
    ({"type": "dict"}, "a=1", ["v must be a mapping, got str 'a=1'"]),
    ({"type": "raw"}, 3, []),
    ({"type": "raw"}, "3", []),
    ({"type": "jsonarg"}, 3, []),  # a type these checks do not police
    ({"type": "str", "required": True}, None, ["v is required and must not be null"]),
    ({"type": "int"}, None, []),
    ({"type": "int", "choices": [1, 2]}, None, []),
    ({"type": "str", "choices": ["wheel", "source"]}, "sdist", ["v is 'sdist'; allowed: wheel, source"]),
    ({"type": "str", "choices": ["wheel", "source"]}, "wheel", []),
    ({"type": "int", "choices": [1, 2]}, 2, []),
    ({"type": "list", "elements": "str", "choices": ["a", "b"]}, ["a", "b", "a"], []),
    ({"type": "list", "elements": "str", "choices": ["a", "b"]}, ["a", "c", "b", "d"],
     ["v[1] is 'c'; allowed: a, b", "v[3] is 'd'; allowed: a, b"]),
    ({"type": "list", "elements": "int", "choices": [1, 2]}, [1, "2", 3],
     ["v[1] must be an integer, got str '2'", "v[1] is '2'; allowed: 1, 2", "v[2] is 3; allowed: 1, 2"]),
    ({"type": "list", "elements": "int"}, [1, True, "x"],
     ["v[1] must be an integer, got bool True", "v[2] must be an integer, got str 'x'"]),
    ({"type": "list", "elements": "dict", "options": {"port": {"type": "int"}, "host": {}}},
     [{"port": 1}, {"port": "1", "hots": "x"}],
     ["v[1].port must be an integer, got str '1'", "v[1] has an unknown key 'hots'; did you mean 'host'?"]),
    (NESTED, {"port": 1, "nested": {"on": "yes", "of": 1}, "zzz": 2},
     [f"v.nested.on is the string 'yes', not a boolean; write true{WHEN}", "v.nested has an unknown key 'of'",
      "v has an unknown key 'zzz'"]),
    (NESTED, {"port": None, "nested": None}, []),
    ({"type": "dict", "options": {"port": None}}, {"port": 5},
     [f"v.port must be a string, got int 5; quote it in YAML (e.g. \"5\"){QUOTE}"]),
]


@pytest.mark.parametrize(("spec", "value", "expected"), TYPE_CASES, ids=[repr(c[:2]) for c in TYPE_CASES])
def test_check_value(spec, value, expected):
    assert check_value("v", value, spec) == expected


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("gpu_capability", "12.0", []),
    ("gpu_capability", "8.7", []),
    ("gpu_capability", None, []),
    ("x_capabilities", ["9.0", None, "120"],
     ["x_capabilities is '120'; write the capability as \"12.0\""]),
    ("x_capabilities", "12.0", []),  # not a list: checked as one value
    ("x_capabilities", ("9.0",), ["x_capabilities: CUDA architecture ('9.0',) must be a string such as "
                                  "\"12.0\", \"sm_120a\" or \"compute_90\" (got tuple; quote numbers in "
                                  "YAML)"]),
    ("x_capability", ["12.0"], ["x_capability: CUDA architecture ['12.0'] must be a string such as \"12.0\", "
                                "\"sm_120a\" or \"compute_90\" (got list; quote numbers in YAML)"]),
])
def test_check_capability(name, value, expected):
    assert check_capability(name, value) == expected


SPECS = {
    "demo": {"argument_specs": {
        "main": {"options": {"demo_jobs": {"type": "int"}, "demo_capability": {"type": "str"},
                             "demo_capabilities": {"type": "list"}, "demo_token": {"type": "str"}}},
        "other": {"options": {"demo_jobs": {"type": "str"}, "demo_extra": None}}}},
    "alpha": {"argument_specs": {"main": {"options": {"demo_jobs": {"type": "bool"}}}}},
    "empty": None,
    "bare": {"argument_specs": {"main": None}},
}


def test_known_options_first_role_in_name_order_wins():
    assert known_options(SPECS) == {
        "demo_jobs": ("alpha", {"type": "bool"}), "demo_capability": ("demo", {"type": "str"}),
        "demo_capabilities": ("demo", {"type": "list"}), "demo_token": ("demo", {"type": "str"}),
        "demo_extra": ("demo", {})}
    assert known_options(None) == {}
    assert known_options({}) == {}


def test_host_checks_combine_names_values_prefixes_and_removed():
    variables = {"demo_jobs": "4", "demo_capability": 12.0, "demo_capabilities": ["12.0", "9"], "demo_max": 1,
                 "gpu_x": 1, "other_var": 1, "demo_extra": 5, "demo_removed": 1}
    problems = check_host_variables("h1", variables, SPECS, prefixes=("gpu_",),
                                    removed={"demo_removed": "use demo_jobs", "demo_jobs_old": "gone"},
                                    names=["demo_token", "demo_jobs_old", "demo_tokne"])
    assert problems == [
        "host h1: demo_capabilities: '9' is not a CUDA architecture; use a capability like \"12.0\" or "
        "\"120\", or an arch like \"sm_120a\", \"sm_100f\", \"compute_90\"",
        f"host h1: demo_capability must be a string, got float 12.0; quote it in YAML (e.g. \"12.0\"){QUOTE}",
        f"host h1: demo_extra must be a string, got int 5; quote it in YAML (e.g. \"5\"){QUOTE}",
        "host h1: demo_jobs must be a boolean (true/false), got str '4'",
        "host h1: demo_jobs_old is not supported: gone",
        "host h1: demo_max is not a variable of this project",
        "host h1: demo_removed is not supported: use demo_jobs",
        "host h1: demo_tokne is not a variable of this project; did you mean 'demo_token'?",
        "host h1: gpu_x is not a variable of this project",
    ]


def test_capability_spelling_is_checked_only_after_the_type():
    assert check_host_variables("h1", {"demo_capability": "9.0"}, SPECS) == []
    assert check_host_variables("h1", {"demo_capability": "90"}, SPECS) == [
        "host h1: demo_capability is '90'; write the capability as \"9.0\""]
    assert check_host_variables("h1", {}, SPECS, names=["demo_capability"]) == []


def test_prefixes_are_policed_only_when_given():
    assert check_host_variables("h1", {"gpu_x": 1}, SPECS) == []
    assert check_host_variables("h1", {"gpu_x": 1}, SPECS, prefixes=["gpu_"]) == [
        "host h1: gpu_x is not a variable of this project"]
    assert check_host_variables("h1", {"bare_x": 1, "empty_y": 2}, SPECS) == [
        "host h1: bare_x is not a variable of this project",
        "host h1: empty_y is not a variable of this project"]
    assert check_host_variables("h1", {"x": 1}, None) == []


def test_a_required_option_given_by_name_only_is_not_null():
    # Secrets are passed by name only: their value is unknown here, not null.
    token = {"demo_token": {"type": "str", "required": True}}
    specs = {"demo": {"argument_specs": {"main": {"options": token}}}}
    assert check_host_variables("h1", {}, specs, names=["demo_token"]) == []
    assert check_host_variables("h1", {"demo_token": None}, specs) == [
        "host h1: demo_token is required and must not be null"]


def test_foreign_variables_do_not_stop_the_checks():
    assert check_host_variables("h1", {"aaa_foreign": 1, "demo_jobs": "x", "zzz": 2}, SPECS) == [
        "host h1: demo_jobs must be a boolean (true/false), got str 'x'"]


def test_every_entry_of_a_capability_list_is_checked_after_an_unknown_one():
    unknown, spelling = check_capability("x_capabilities", ["12.5", "120", "9.0"])
    assert unknown.startswith("x_capabilities: '12.5' is not the compute capability of any known NVIDIA GPU")
    assert spelling == "x_capabilities is '120'; write the capability as \"12.0\""

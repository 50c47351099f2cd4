"""module_utils/python_dists: the listing's own keys and its errors, named as the listing's."""

from __future__ import annotations

import os
import sys

import pytest
from ansible.module_utils.python_dists import DistributionsError, probe_distributions
from ansible.module_utils.python_probe import MARKER


def test_the_listing_names_the_interpreter_and_its_version():
    facts = probe_distributions(sys.executable)
    assert set(facts) == {"python", "python_version", "distributions"}
    assert os.path.samefile(facts["python"], sys.executable)
    assert facts["python_version"] == ".".join(map(str, sys.version_info[:3]))
    names = [d["name"] for d in facts["distributions"]]
    assert "ansible-core" in names          # canonical: the metadata spells it ansible_core or ansible-core
    assert all(name == name.lower() and "_" not in name for name in names)


def _interpreter(tmp_path, body):
    # Stands in for an interpreter whose answer cannot be had from this one (too old, or hung).
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_an_interpreter_that_hangs_is_named_in_a_listing_error(tmp_path):
    python = _interpreter(tmp_path, "exec sleep 3\n")
    with pytest.raises(DistributionsError, match=rf"^the distribution listing in {python} did not finish "
                                                  r"within 0\.3 s and was killed"):
        probe_distributions(python, timeout=0.3)


def test_the_probes_own_error_is_raised_with_the_interpreter(tmp_path):
    python = _interpreter(tmp_path, f"""echo '{MARKER}{{"error": "importlib.metadata is missing"}}'\n""")
    with pytest.raises(DistributionsError) as caught:
        probe_distributions(python)
    assert str(caught.value) == f"{python}: importlib.metadata is missing"

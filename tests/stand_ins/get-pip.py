"""STAND-IN for get-pip.py, which ansible-test downloads from its CI file server to put pip into the
empty virtual environment it makes for a sanity test (CI and the hosts here cannot reach that server).

ansible-test runs this file as ``python get-pip.py --disable-pip-version-check pip==X [--no-setuptools]
[--no-wheel]`` inside the new venv. Here pip comes from the interpreter's own bundled wheel (ensurepip,
no network), which then installs the requested pip version and the test's pinned requirements from the
package index the machine's pip configuration names (PyPI), like any other install in this project.
tests/validate_modules.py copies it to where ansible-test looks for a cached download.
"""

import ensurepip
import os
import subprocess
import sys

environment = dict(os.environ)  # ensurepip points PIP_CONFIG_FILE at /dev/null for its own run
ensurepip.bootstrap(upgrade=False)
arguments = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", *arguments], env=environment))

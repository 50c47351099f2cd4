"""A plain-ASCII locale for tests that show a file is read as UTF-8 whatever the host's locale is."""

from __future__ import annotations

import contextlib
import locale
import sys

from prereq import require


@contextlib.contextmanager
def c_locale():
    """LC_CTYPE=C for this process while the block runs: open() without an encoding then reads and writes
    ASCII only. Python's UTF-8 mode reads every file as UTF-8 whatever the locale, so such a test could
    not fail there: it is a missing prerequisite (the unit suite does not turn the mode on)."""
    require(not sys.flags.utf8_mode, "Python's UTF-8 mode reads every file as UTF-8: no locale to vary")
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)

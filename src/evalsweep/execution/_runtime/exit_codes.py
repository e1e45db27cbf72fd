"""The exit statuses and the setup-failure line the sandbox's own processes use, defined once.

The sample loop exists twice, in Python (``sample_role.py``) and in C (``_sampleloop.c``). The C
loop gets these values as macros when it is built (``setup.py`` reads this file) and exports them
back as module constants (same names), so a test checks that the built extension agrees with this
file.
"""

from __future__ import annotations

#: A sample's process whose confinement failed before the sample's first line ran, a launcher
#: that could not start its zygote, or a zygote whose setup failed: never the sample's own exit.
SETUP_FAILED = 125
#: A sample zygote after something it forked survived SIGKILL: the parent replaces it.
UNCLEAN = 3
#: The start of the line such a process writes to its standard error before ``SETUP_FAILED``;
#: the verdict trusts the exit status only together with this line.
SETUP_FAILED_LINE = "evalsweep: sandbox setup failed"

#: A plain run whose report channel the program closed or replaced (``os.closerange``): the
#: test ended but its outcome cannot be sent; with :data:`REPORT_LOST_LINE` on standard error.
REPORT_LOST = 122
REPORT_LOST_LINE = "evalsweep: the plain run's report channel is gone"

#: The names the C loop receives as ``EVALSWEEP_<NAME>`` macros (``setup.py``).
C_MACROS = ("SETUP_FAILED", "UNCLEAN", "SETUP_FAILED_LINE")

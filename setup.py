"""Build script for evalsweep's one C extension (everything else is in pyproject.toml).

The sample sandbox's per-sample loop (``_sampleloop``) is C so that the zygote
every sample is forked from writes almost none of its own memory between
forks. The extension is optional: where it cannot be built (no C compiler),
the same loop runs in Python, and the run's record says which one served.
"""

import os

from setuptools import Extension, setup

# EVALSWEEP_BUILD_EXTENSION=0 installs without building it: for a second
# editable install of the same tree (an editable build writes the extension
# into the source tree, over a file that running sandboxes have mapped).
BUILD = os.environ.get("EVALSWEEP_BUILD_EXTENSION", "1") != "0"

setup(
    ext_modules=[
        Extension(
            "evalsweep.execution._runtime._sampleloop",
            ["src/evalsweep/execution/_runtime/_sampleloop.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
    if BUILD
    else []
)

"""Build script for evalsweep's one C extension (everything else is in pyproject.toml).

The sample sandbox's per-sample loop (``_sampleloop``) is C so that the zygote
every sample is forked from writes almost none of its own memory between
forks. The extension is optional: where it cannot be built (no C compiler),
the same loop runs in Python, and the run's record says which one served.
"""

import ast
import json
import os
from pathlib import Path

from setuptools import Extension, setup

# EVALSWEEP_BUILD_EXTENSION=0 installs without building it: for a second
# editable install of the same tree (an editable build writes the extension
# into the source tree, over a file that running sandboxes have mapped).
BUILD = os.environ.get("EVALSWEEP_BUILD_EXTENSION", "1") != "0"


def exit_code_macros():
    """The sandbox's exit statuses and setup-failure line from their one definition
    (``exit_codes.py``, the names in ``C_MACROS``) as ``EVALSWEEP_<NAME>`` macros for the C
    loop; read with ``ast``, without importing evalsweep."""
    source = Path(__file__).parent / "src/evalsweep/execution/_runtime/exit_codes.py"
    values = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(source.read_text()).body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    return [
        (f"EVALSWEEP_{name}", json.dumps(values[name]))  # a JSON string is a C string literal
        for name in values["C_MACROS"]
    ]


setup(
    ext_modules=[
        Extension(
            "evalsweep.execution._runtime._sampleloop",
            ["src/evalsweep/execution/_runtime/_sampleloop.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            define_macros=exit_code_macros(),
            optional=True,
        )
    ]
    if BUILD
    else []
)

"""The dtype names a user may give (``--dtype``), defined once.

A leaf module: the options table (its help and checks), the backends (what they load) and
the cache key (what a name stands for) read it, and it imports nothing of evalsweep.
"""

from __future__ import annotations

__all__ = ["DTYPES", "DTYPE_CHOICES"]

#: The dtype names a user may give (``--dtype``), each to its canonical name;
#: ``auto`` (the checkpoint's own dtype) is resolved by each backend.
DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
          "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}  # fmt: skip
#: The ``--dtype`` choices as the help and the errors name them.
DTYPE_CHOICES = "auto, float32, float16 or bfloat16"

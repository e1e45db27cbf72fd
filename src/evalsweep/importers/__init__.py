"""Results computed by other harnesses, brought into the store.

``import_lm_eval(folder, store)`` reads lm-evaluation-harness's
``--log_samples`` output so that ``evalsweep compare``, ``flips`` and
``report`` pair its per-question scores like evalsweep's own.
"""

from evalsweep.importers._lm_eval import ImportedRun, import_lm_eval

__all__ = ["ImportedRun", "import_lm_eval"]

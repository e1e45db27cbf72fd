"""Third-party progress bars, log lines and warnings kept off evalsweep's own output.

transformers, huggingface_hub and datasets draw their own tqdm bars ("Loading
checkpoint shards", downloads, "Writing model shards") and log warnings on stderr;
other libraries warn through Python's :mod:`warnings`. Written between evalsweep's
progress lines they garble what a person reads. Every command runs inside
:func:`third_party_quiet` (the command line's error handler enters it), so this is
the one place where that is decided; ``--debug`` (or ``EVALSWEEP_DEBUG=1``) lets
everything through.

What is switched, all with the libraries' own switches:

- environment variables the libraries read when imported (set only where the person
  has not set them): huggingface_hub's bars, which transformers' bars follow,
  datasets' bars, and the three libraries' log levels (errors only);
- for a library already imported (a command run inside another program), its
  functions that do the same;
- Python warnings raised outside evalsweep's own modules are ignored; a warning
  attributed to evalsweep's code (a deprecated call of ours) is still shown;
- log records of libraries that configure no handler of their own reach stderr only
  from ERROR up (logging's last-resort handler).

Leaving the block puts back what it changed: the environment, the warning filters,
the last-resort level and the switches of the libraries that were already imported.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from functools import partial

#: What each library reads on import, and the value that quiets it.
ENVIRONMENT: Mapping[str, str] = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers takes its bars' default from this
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
}

#: Modules whose warnings are evalsweep's own (shown even when quiet).
OWN_MODULES = r"evalsweep(\.|$)"

_set_here: set[str] = set()


@contextmanager
def third_party_quiet(enabled: bool = True) -> Iterator[None]:
    """Keep third-party progress bars, logs and warnings off the terminal while inside."""
    if not enabled:
        yield
        return
    with ExitStack() as undo:
        for name, value in ENVIRONMENT.items():
            if name not in os.environ:
                os.environ[name] = value
                _set_here.add(name)
                undo.callback(_unset, name)
        for restore in _quiet_loaded():
            undo.callback(restore)
        undo.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore")
        warnings.filterwarnings("default", module=OWN_MODULES)
        last_resort = logging.lastResort
        if last_resort is not None:
            undo.callback(last_resort.setLevel, last_resort.level)
            last_resort.setLevel(logging.ERROR)
        yield


def environment_for_others() -> dict[str, str]:
    """This process's environment without what :func:`third_party_quiet` set in it: for a
    command of the person's own (``--on-regression``), which should run as they expect."""
    return {key: value for key, value in os.environ.items() if key not in _set_here}


def _unset(name: str) -> None:
    os.environ.pop(name, None)
    _set_here.discard(name)


def _quiet_loaded() -> list[Callable[[], object]]:
    """The same switches for libraries imported before the block: what undoes each."""
    restore: list[Callable[[], object]] = []
    if "huggingface_hub" in sys.modules:
        from huggingface_hub import utils as hub

        if not hub.are_progress_bars_disabled():
            hub.disable_progress_bars()
            restore.append(hub.enable_progress_bars)
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        restore.append(
            partial(transformers_logging.set_verbosity, transformers_logging.get_verbosity())
        )
        transformers_logging.set_verbosity_error()
        if transformers_logging.is_progress_bar_enabled():
            transformers_logging.disable_progress_bar()
            restore.append(transformers_logging.enable_progress_bar)
    if "datasets" in sys.modules:
        import datasets

        restore.append(partial(datasets.logging.set_verbosity, datasets.logging.get_verbosity()))
        datasets.logging.set_verbosity_error()
        if not datasets.utils.are_progress_bars_disabled():
            datasets.disable_progress_bars()
            restore.append(datasets.enable_progress_bars)
    return restore

"""Training runs an agent names: expanded when quoted, pinned in the quote.

A run is a local run folder (a folder of ``checkpoint-N`` folders, see
:mod:`evalsweep.runs`) whose real path lies inside one of the folders the person's
configuration names in ``[agent] run_dirs``, or a Hub pattern (``org/model@step*``).
With the run selection (``steps``, ``every``, ``last``: the options of
:data:`evalsweep.options.OPTIONS` that agents may set), :func:`expand_run` turns the
references into the run's selected checkpoints in step order, as ``evalsweep run``
expands them. The quote holds that list (each checkpoint's identity pinned, as for any
checkpoint), the job runs exactly it, and a checkpoint whose name the text rule refuses
(a control character, a bidi override: a name that could rewrite what a person
approves) is left out before the selection and named, escaped, among those left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsweep import text
from evalsweep.agent._inputs import MAX_CHECKPOINTS, MAX_REFERENCE_BYTES, InputError

#: The agent options that choose a run's checkpoints (their names in the options table).
SELECTION = ("steps", "every", "last")


def _refused_name(name: str) -> str | None:
    """Why a run's checkpoint cannot be quoted by its name (the text rule), or None."""
    found = text.problem(name, max_chars=MAX_REFERENCE_BYTES)
    if found is not None:
        return f"its name {found}"
    if any(len(part.encode("utf-8", "surrogatepass")) > 255 for part in name.split("/")):
        return "its name has a path component longer than 255 bytes"
    return None


def expand_run(
    checkpoints: Sequence[str], values: Mapping[str, Any], run_dirs: Sequence[Path]
) -> tuple[list[str], dict[str, Any] | None]:
    """The checkpoints a quote covers, and what the run was (``None``: no run was named).

    ``values``: the agent options by option name (``steps``, ``every``, ``last``). What
    each reference is (a run folder, a Hub pattern, one checkpoint) is decided once, by
    :func:`evalsweep.runs.run_kind`, in the expansion itself: the run_dirs check is made
    on the very decision that reads the folder.

    Raises:
        InputError: a run folder outside ``run_dirs``, a selection with no run to select
            from, or more checkpoints than one quote may hold.
        ConfigError, CheckpointError: a run with none selected, a Hub pattern that cannot
            be listed (as ``evalsweep run`` says it).
    """
    from evalsweep.runs import NoRunError, Selection, expand_references

    selection = Selection.from_options(values.get("steps"), values.get("every"), values.get("last"))
    where = (
        "run folders are taken only from the folders the person's configuration names in "
        "[agent] run_dirs"
        + (f" ({', '.join(str(d) for d in run_dirs)})" if run_dirs else "; it names none")
    )

    def allowed(index: int, _reference: str, path: Path) -> None:
        real = path.resolve()
        if not any(real.is_relative_to(folder) for folder in run_dirs):
            raise InputError(f"checkpoints[{index}] is a run folder outside the allowed "
                             f"folders: {where}")  # fmt: skip

    try:
        expansion = expand_references(
            list(checkpoints), selection, refuse=_refused_name, check_run=allowed
        )
    except NoRunError:
        raise InputError(
            "steps, every and last select from a run: a run folder (in [agent] run_dirs) "
            "or a Hub pattern such as org/model@step*"
        ) from None
    if not expansion.runs:
        return list(checkpoints), None
    references = expansion.references
    if len(references) > MAX_CHECKPOINTS:
        raise InputError(
            f"the run's selection keeps {len(references)} checkpoints; at most "
            f"{MAX_CHECKPOINTS} (choose fewer with steps, every or last)"
        )
    if len(set(references)) != len(references):
        raise InputError("checkpoints names the same checkpoint twice (also within a run)")
    run = {
        "references": list(checkpoints),
        "selection": {name: values.get(name) for name in SELECTION},
        "steps": {
            reference: expansion.steps[reference]
            for reference in references
            if reference in expansion.steps
        },  # fmt: skip
        "left_out": [[text.visible(name), text.visible(why)] for name, why in expansion.skipped],
    }
    return references, run

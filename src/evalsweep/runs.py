"""A training run as a reference: its checkpoints, in step order, complete ones only.

People compare the checkpoints of one run far more often than unrelated models. A
run is named three ways, and each becomes a list of ordinary checkpoint references
(what :mod:`evalsweep.checkpoints` resolves) with the training step of each:

- a local folder holding checkpoint folders, as transformers' Trainer writes them
  (``checkpoint-1000``), or ``step-N``, ``stepN``, ``global_stepN``, ``iter_N``,
  or any name with exactly one number;
- a Hub repository's step branches or tags, by a pattern (``org/model@step*``),
  listed with ``huggingface_hub``;
- checkpoints given one by one that are one run: folders of one parent, or
  revisions of one Hub repository, each named as frameworks name steps
  (``checkpoint-N``, ``step-N``, ``stepN``, ``global_stepN``, ``iter_N``; not any
  name with a number, so ``exp2 exp1`` keep their order and their baseline). They
  are put in step order too, and :attr:`Expansion.notes` says so once.

A checkpoint folder that is not complete (its save in progress, a shard its
safetensors index lists missing, a weight file shorter than its header says) is
left out and named in :attr:`Expansion.skipped`, never half-loaded.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalsweep.checkpoints import HUB_ID, _check_safetensors, reference_kind, weight_files
from evalsweep.errors import CheckpointError, ConfigError

#: The names training frameworks give checkpoint folders and step branches; any
#: other name with exactly one number also counts, by that number.
KNOWN_NAMES = re.compile(r"^(?:checkpoint|step|global_step|iter)[-_]?0*(\d+)$")
#: Folders a save writes before renaming them into place (Trainer's ``tmp-checkpoint-N``).
IN_PROGRESS = re.compile(r"^(?:tmp|\.tmp|temp)[-_.]", re.IGNORECASE)
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"


def step_of(name: str) -> int | None:
    """The training step a checkpoint folder or revision name stands for, or None."""
    known = KNOWN_NAMES.match(name)
    if known:
        return int(known.group(1))
    numbers = re.findall(r"\d+", name)
    return int(numbers[0]) if len(numbers) == 1 else None


@dataclass(frozen=True)
class Selection:
    """Which of a run's checkpoints to take (applied in this order).

    Attributes:
        start, stop: steps from ``start`` to ``stop``, both included (None: open).
        stride: within that range, steps ``start``, ``start + stride``, ...
        every: then every N-th checkpoint, the first included.
        last: then the last K.
    """

    start: int | None = None
    stop: int | None = None
    stride: int | None = None
    every: int | None = None
    last: int | None = None

    @property
    def chosen(self) -> bool:
        chosen = (self.start, self.stop, self.stride, self.every, self.last)
        return any(v is not None for v in chosen)

    @classmethod
    def from_options(
        cls, steps: str | None, every: int | None = None, last: int | None = None
    ) -> Selection:
        """``--steps A:B[:STRIDE]``, ``--every N`` and ``--last K`` as a selection.

        Raises:
            ConfigError: a ``--steps`` value that is not ``A:B`` or ``A:B:STRIDE`` of
                whole numbers (A or B may be empty), or a count below 1.
        """
        start = stop = stride = None
        if steps is not None:
            parts = steps.split(":")
            numeric = all(p.strip().isdigit() or not p.strip() for p in parts)
            if len(parts) not in (2, 3) or not numeric:
                raise ConfigError(
                    f"--steps {steps!r}: expected A:B or A:B:STRIDE (whole numbers, A or B "
                    "may be empty)"
                )
            numbers = [int(p) if p.strip() else None for p in parts]
            start, stop = numbers[0], numbers[1]
            stride = numbers[2] if len(numbers) == 3 else None
            if stride is not None and stride < 1:
                raise ConfigError(f"--steps {steps!r}: STRIDE must be at least 1")
            if start is not None and stop is not None and stop < start:
                raise ConfigError(f"--steps {steps!r}: B is before A")
        for flag, value in (("--every", every), ("--last", last)):
            if value is not None and value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
        return cls(start, stop, stride, every, last)

    def apply(self, steps: Sequence[int]) -> list[int]:
        """The indices of ``steps`` (in step order) this selection keeps."""
        kept = [
            i
            for i, step in enumerate(steps)
            if (self.start is None or step >= self.start)
            and (self.stop is None or step <= self.stop)
        ]
        if self.stride is not None and kept:
            origin = self.start if self.start is not None else steps[kept[0]]
            kept = [i for i in kept if (steps[i] - origin) % self.stride == 0]
        if self.every is not None:
            kept = kept[:: self.every]
        if self.last is not None:
            kept = kept[-self.last :]
        return kept


@dataclass
class Expansion:
    """References as given, with every run expanded.

    Attributes:
        references: checkpoint references to resolve, runs in step order.
        steps: the training step of each reference that belongs to a run.
        skipped: incomplete checkpoints left out, with why.
        notes: what a person should be told once (an order that was changed).
        runs: how many of the references given were runs (run folders, Hub patterns).
    """

    references: list[str] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: int = 0

    @property
    def one_run(self) -> bool:
        """More than one reference, each a step of a run, in step order (the trend view
        applies)."""
        return len(self.references) > 1 and in_step_order(self.references, self.steps)


def in_step_order(references: Sequence[str], steps: Mapping[str, int]) -> bool:
    """Every reference has a step, and each step is after the one before: what a list
    must be to be called "in step order"."""
    if not all(r in steps for r in references):
        return False
    numbers = [steps[r] for r in references]
    return all(a < b for a, b in zip(numbers, numbers[1:], strict=False))


class NoRunError(ConfigError):
    """A selection (``--steps``, ``--every``, ``--last``) with no run to select from."""


def pinned_value(references: Sequence[str], steps: Mapping[str, int]) -> str:
    """``--pinned``'s value for ``references``: each one's step, or ``-`` (no step)."""
    return " ".join(str(steps[r]) if r in steps else "-" for r in references)


def pinned_expansion(references: Sequence[str], value: str) -> Expansion:
    """References given with ``--pinned``: exactly these, in this order (none expanded,
    none reordered), with the steps ``value`` (:func:`pinned_value`) gives them.

    Raises:
        ConfigError: ``value`` does not give one step (or ``-``) per reference.
    """
    words = value.split()
    if len(words) != len(references):
        raise ConfigError(f"--pinned gives {len(words)} steps for {len(references)} checkpoints")
    steps = {r: int(w) for r, w in zip(references, words, strict=True) if w != "-"}
    return Expansion(references=list(references), steps=steps)


def is_run_folder(path: Path) -> bool:
    """A folder that is not itself a checkpoint and holds folders named with a step."""
    if not path.is_dir() or (path / "config.json").is_file():
        return False
    if (path / "adapter_config.json").is_file():
        return False
    return any(child.is_dir() and step_of(child.name) is not None for child in path.iterdir())


def incomplete(folder: Path) -> str | None:
    """Why a checkpoint folder cannot be loaded yet (a save in progress, a missing shard),
    or None when it is complete."""
    if IN_PROGRESS.match(folder.name):
        return "save in progress"
    config = folder / "config.json"
    adapter = folder / "adapter_config.json"
    if not config.is_file() and not adapter.is_file():
        return "no config.json yet"
    for index_name in (SAFETENSORS_INDEX, BIN_INDEX):
        index = folder / index_name
        if not index.is_file():
            continue
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"{index_name} is unreadable (written now?)"
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            return f"shard {missing[0]} missing ({len(missing)} of {len(shards)})"
    weights = weight_files(folder)
    if adapter.is_file() and not config.is_file():
        weights = sorted(folder.glob("adapter_model.*"))
    if not weights:
        return "no weight files yet"
    for file in weights:
        if file.suffix == ".safetensors":
            try:
                _check_safetensors(folder.name, file)
            except CheckpointError:
                return f"{file.name} is shorter than its header says (being written?)"
    return None


def is_hub_pattern(reference: str) -> bool:
    """``org/model@step*``: a Hub repository's step branches and tags, by a pattern (never
    an existing local path: :func:`evalsweep.checkpoints.reference_kind` decides)."""
    return reference_kind(reference) == "hub_pattern"


def run_kind(reference: str) -> str | None:
    """``"folder"`` (a local run folder), ``"hub"`` (a Hub step pattern) or ``None`` (one
    checkpoint), by the one decision of :func:`evalsweep.checkpoints.reference_kind`."""
    kind = reference_kind(reference)
    if kind == "local":
        return "folder" if is_run_folder(Path(reference).expanduser()) else None
    return "hub" if kind == "hub_pattern" else None


def expand_references(
    references: Sequence[str],
    selection: Selection | None = None,
    refuse: Callable[[str], str | None] | None = None,
    check_run: Callable[[int, str, Path], None] | None = None,
) -> Expansion:
    """Expand run folders and Hub step patterns; order one run's checkpoints by step.

    ``refuse``: says why a run's checkpoint (by the reference it would have) is left
    out, or ``None``; it is left out before the selection, named in ``skipped``.
    ``check_run``: called with the index, the reference and the folder of each local
    run folder before it is read (a policy that raises to refuse it), on the same
    decision that then expands it.

    Raises:
        CheckpointError: a run with no checkpoints (or none selected), a Hub pattern
            that matches no step branch or tag, or the Hub cannot be asked.
        NoRunError: a selection given with no run to select from.
    """
    selection = selection or Selection()
    expansion = Expansion()
    runs = 0
    for index, reference in enumerate(references):
        kind = run_kind(reference)
        if kind == "folder":
            runs += 1
            path = Path(reference).expanduser()
            if check_run is not None:
                check_run(index, reference, path)
            found = _local_steps(reference, path, expansion, refuse)
            _add(expansion, reference, found, selection)
        elif kind == "hub":
            runs += 1
            found = _refused(expansion, _hub_steps(reference), refuse)
            _add(expansion, reference, found, selection)
        else:
            expansion.references.append(reference)
    expansion.runs = runs
    if runs == 0:
        _one_run_given(expansion, selection)
    return expansion


def _add(
    expansion: Expansion, reference: str, found: list[tuple[int, str]], selection: Selection
) -> None:
    if not found:
        raise CheckpointError(f"run {reference!r}: no complete checkpoints in it")
    found.sort()
    kept = [found[i] for i in selection.apply([step for step, _ in found])]
    if not kept:
        raise CheckpointError(
            f"run {reference!r}: the selection keeps none of its {len(found)} checkpoints "
            f"(steps {found[0][0]} to {found[-1][0]})"
        )
    for step, name in kept:
        if name not in expansion.steps:
            expansion.references.append(name)
            expansion.steps[name] = step


def _refused(
    expansion: Expansion,
    found: list[tuple[int, str]],
    refuse: Callable[[str], str | None] | None,
) -> list[tuple[int, str]]:
    """``found`` without the checkpoints ``refuse`` gives a reason for (named in skipped)."""
    if refuse is None:
        return found
    kept = []
    for step, name in found:
        why = refuse(name)
        if why is None:
            kept.append((step, name))
        else:
            expansion.skipped.append((name, why))
    return kept


def _local_steps(
    reference: str,
    path: Path,
    expansion: Expansion,
    refuse: Callable[[str], str | None] | None = None,
) -> list[tuple[int, str]]:
    """The complete checkpoint folders of a run folder, with their steps."""
    found: list[tuple[int, str]] = []
    seen: dict[int, str] = {}
    base = reference.rstrip("/")
    for child in sorted(path.iterdir()):
        step = step_of(child.name)
        if not child.is_dir() or step is None:
            continue
        name = f"{base}/{child.name}"
        problem = (refuse(name) if refuse is not None else None) or incomplete(child)
        if problem:
            expansion.skipped.append((name, problem))
            continue
        if step in seen:
            raise CheckpointError(
                f"run {reference!r}: {seen[step]} and {child.name} are both step {step}"
            )
        seen[step] = child.name
        found.append((step, name))
    return found


def _hub_steps(reference: str) -> list[tuple[int, str]]:
    """The branches and tags of a Hub repository matching a pattern (``org/model@step*``)."""
    repo, _, pattern = reference.partition("@")
    if not HUB_ID.match(repo):
        raise CheckpointError(f"run {reference!r}: {repo!r} is not a Hub id (org/name)")
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a dependency
        raise CheckpointError(f"run {reference!r}: huggingface_hub is not installed") from exc
    try:
        refs = HfApi().list_repo_refs(repo)
    except RepositoryNotFoundError as exc:
        raise CheckpointError(f"run {reference!r}: no such repository on the Hub") from exc
    except Exception as exc:  # network down, offline mode, HTTP errors
        reason = (str(exc).strip().split("\n")[0] or type(exc).__name__)[:160]
        if "offline mode" in reason:
            reason = "HF_HUB_OFFLINE is set"
        raise CheckpointError(f"run {reference!r}: cannot list its branches ({reason})") from exc
    found: dict[int, str] = {}
    for ref in [*refs.branches, *refs.tags]:
        step = step_of(ref.name)
        if step is not None and fnmatch.fnmatchcase(ref.name, pattern):
            found.setdefault(step, f"{repo}@{ref.name}")
    if not found:
        raise CheckpointError(
            f"run {reference!r}: no branch or tag of {repo} matches {pattern!r} with a step number"
        )
    return list(found.items())


def _one_run_given(expansion: Expansion, selection: Selection) -> None:
    """Checkpoints given one by one that are one run: put them in step order, once said."""
    references = expansion.references
    if selection.chosen:
        raise NoRunError("--steps, --every and --last select from a run folder or a Hub pattern")
    if len(references) < 2:
        return
    groups = set()
    steps: dict[str, int] = {}
    for reference in references:
        if reference_kind(reference) != "local" and "@" in reference:
            group, _, name = reference.partition("@")
        else:
            parent, _, name = reference.rstrip("/").rpartition("/")
            group = parent or "."
        known = KNOWN_NAMES.match(name)  # one by one: only names frameworks give steps
        if known is None:
            return
        step = int(known.group(1))
        groups.add(group)
        steps[reference] = step
    if len(groups) != 1 or len(set(steps.values())) != len(steps):
        return
    ordered = sorted(references, key=steps.__getitem__)
    if ordered != references:
        expansion.notes.append(
            f"the {len(references)} checkpoints are one run ({groups.pop()}): shown in step order"
        )
    expansion.references = ordered
    expansion.steps = steps

"""Checkpoint references and the identities they resolve to.

A person names checkpoints the way they think of them: a local folder, a Hub
id (``org/name``) or a training step on the Hub (``org/name@step100000``).
Results must record exactly what was evaluated, so every reference is
resolved before any compute to an identity: the Hub commit sha, or for a
local folder a fingerprint of every file loading it can read (every regular file
of the folder but the training state a trainer saves beside it, see
:data:`TRAINING_ONLY`). Two references to the same bytes share an identity, and
so share cached results.

What kind of reference a string is (a local path, a Hub id, a Hub step pattern)
is decided once, by :func:`reference_kind`, for every caller: a string naming an
existing path is local, whatever characters it holds.

A PEFT adapter (a folder or Hub repository holding ``adapter_config.json``)
resolves to its base model plus the adapter: both identities are recorded,
and the adapter's identity names its base, so two fine-tunes of one base can
be compared without merging them and never share cached rows.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from evalsweep.errors import CheckpointError

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
ADAPTER_CONFIG = "adapter_config.json"
#: Files a trainer saves beside a checkpoint that loading the model and its tokenizer never
#: reads (optimizer, scheduler, scaler and RNG states, the trainer's state and arguments,
#: DeepSpeed's tag and script). Every other regular file of a checkpoint folder is part of
#: its identity: weights, the shard index, config, generation config, tokenizer files, chat
#: templates, code.
TRAINING_ONLY = (
    "optimizer.*", "optimizer_*", "scheduler.*", "scaler.*", "rng_state*.pth",
    "trainer_state.json", "training_args.bin", "latest", "zero_to_fp32.py",
)  # fmt: skip
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
#: What a reference names: a local path, a Hub id (``org/name[@revision]``) or a Hub
#: repository's step branches and tags by a pattern (``org/name@step*``).
ReferenceKind = Literal["local", "hub", "hub_pattern"]


def reference_kind(reference: str) -> ReferenceKind:
    """What ``reference`` names; the one decision every caller uses (the agent's policy
    check, a run's expansion, resolution, the job's command line).

    A string naming an existing path (or written as one: starting with ``.``, ``/`` or
    ``~``) is ``local``, whatever characters it holds (``exp@[lr=3e-4]`` is a folder when
    there is such a folder); otherwise ``@`` followed by ``*``, ``?`` or ``[`` makes a
    ``hub_pattern``, and anything else is a ``hub`` id (checked when it is resolved).
    """
    stripped = reference.strip()
    try:
        exists = Path(stripped).expanduser().exists()
    except (OSError, RuntimeError, ValueError):  # no home for ~user, a NUL
        exists = False
    if exists or stripped.startswith((".", "/", "~")):
        return "local"
    if "@" in stripped and any(c in stripped.partition("@")[2] for c in "*?["):
        return "hub_pattern"
    return "hub"


def training_only(name: str) -> bool:
    """A file a trainer saves beside a checkpoint that loading it never reads."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in TRAINING_ONLY)


def weight_files(path: Path) -> list[Path]:
    """The model weight files of a checkpoint folder (training state excluded)."""
    found = {p for pattern in WEIGHT_PATTERNS for p in path.glob(pattern) if p.is_file()}
    kept = [p for p in found if not training_only(p.name)]
    return sorted(kept, key=lambda p: os.fsencode(p.name))


def identity_files(path: Path) -> list[Path]:
    """Every file of a checkpoint folder its identity covers: each regular file (a link to
    one too) directly in it, but :data:`TRAINING_ONLY`, in the order of their names' bytes."""
    files = [p for p in path.iterdir() if p.is_file() and not training_only(p.name)]
    return sorted(files, key=lambda p: os.fsencode(p.name))


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """What a reference points at, precisely enough to reproduce or cache on.

    Attributes:
        reference: the string the user gave.
        kind: ``"local"`` or ``"hub"``.
        location: absolute folder path, or the Hub repo id.
        revision: the revision asked for (Hub), or None.
        identity: ``hub:<repo>@<commit sha>`` or ``local:sha256:<fingerprint>``; for an
            adapter, the adapter's own identity followed by ``+base=<base identity>``.
        commit: the resolved Hub commit sha, or None for local folders.
        base: for a PEFT adapter, the base model it applies to; None for a full model.
    """

    reference: str
    kind: str
    location: str
    revision: str | None
    identity: str
    commit: str | None = None
    base: ResolvedCheckpoint | None = None

    @property
    def is_adapter(self) -> bool:
        return self.base is not None

    @property
    def load_path(self) -> str:
        """Where the full model's weights load from (the base model's, for an adapter)."""
        return self.base.load_path if self.base else self.location

    @property
    def load_revision(self) -> str | None:
        """Pin Hub loads to the resolved commit, so the weights match the identity."""
        if self.base:
            return self.base.load_revision
        return self.commit if self.kind == "hub" else None

    @property
    def adapter_revision(self) -> str | None:
        """The adapter's own pinned Hub commit (None for a local adapter or a full model)."""
        return self.commit if self.base and self.kind == "hub" else None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ResolvedCheckpoint:
        """Inverse of :meth:`to_dict` (what the store keeps about a reference)."""
        fields = dict(data)
        base = fields.pop("base", None)
        return cls(
            **fields,  # type: ignore[arg-type]
            base=cls.from_dict(base) if isinstance(base, dict) else None,
        )


def resolve_checkpoint(reference: str) -> ResolvedCheckpoint:
    """Resolve one reference; raise :class:`CheckpointError` naming it when it can't be."""
    reference = reference.strip()
    if not reference:
        raise CheckpointError("empty checkpoint reference")
    kind = reference_kind(reference)
    if kind == "local":
        return _resolve_local(reference, Path(reference).expanduser())
    if kind == "hub_pattern":
        raise CheckpointError(
            f"checkpoint {reference!r}: a Hub pattern names a run's steps, not one checkpoint"
        )
    repo, _, revision = reference.partition("@")
    if not HUB_ID.match(repo):
        raise CheckpointError(
            f"checkpoint {reference!r}: not a local folder and not a Hub id (org/name[@revision])"
        )
    return _resolve_hub(reference, repo, revision or None)


def resolve_checkpoints(references: list[str]) -> list[ResolvedCheckpoint]:
    """Resolve every reference up front, so a typo stops the run before any compute."""
    if not references:
        raise CheckpointError("no checkpoints given")
    resolved = [resolve_checkpoint(ref) for ref in references]
    seen: dict[str, str] = {}
    for item in resolved:
        if item.reference in seen:
            raise CheckpointError(f"checkpoint {item.reference!r} is given twice")
        seen[item.reference] = item.identity
    return resolved


def _resolve_local(reference: str, path: Path) -> ResolvedCheckpoint:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {reference!r}: folder {path} does not exist")
    if (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file():
        return _resolve_local_adapter(reference, path)
    config = path / "config.json"
    if not config.is_file():
        raise CheckpointError(f"checkpoint {reference!r}: no config.json in {path}")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: {config} is not valid JSON ({exc})"
        ) from exc
    weights = weight_files(path)
    if not weights:
        raise CheckpointError(
            f"checkpoint {reference!r}: no weight files (*.safetensors, *.bin) in {path}"
        )
    for file in weights:
        if file.suffix == ".safetensors":
            _check_safetensors(reference, file)
    return ResolvedCheckpoint(
        reference=reference,
        kind="local",
        location=str(path.resolve()),
        revision=None,
        identity=f"local:sha256:{_fingerprint(reference, path)}",
    )


def _resolve_local_adapter(reference: str, path: Path) -> ResolvedCheckpoint:
    """A folder holding a PEFT adapter: fingerprint it, then resolve the base it names."""
    base_name = _adapter_base(reference, path / ADAPTER_CONFIG)
    weights = sorted(
        p for p in path.glob("adapter_model.*") if p.suffix in {".safetensors", ".bin"}
    )
    if not weights:
        raise CheckpointError(
            f"checkpoint {reference!r}: adapter without weights (adapter_model.safetensors) "
            f"in {path}"
        )
    for file in weights:
        if file.suffix == ".safetensors":
            _check_safetensors(reference, file)
    base = _resolve_base(reference, base_name, relative_to=path)
    own = f"local:sha256:{_fingerprint(reference, path)}"
    return ResolvedCheckpoint(
        reference=reference,
        kind="local",
        location=str(path.resolve()),
        revision=None,
        identity=f"{own}+base={base.identity}",
        base=base,
    )


def _adapter_base(reference: str, config: Path) -> str:
    """The base model an adapter's ``adapter_config.json`` names."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: {config} is not valid JSON ({exc})"
        ) from exc
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    if not isinstance(base, str) or not base.strip():
        raise CheckpointError(
            f"checkpoint {reference!r}: {config} names no base model (base_model_name_or_path)"
        )
    return base.strip()


def _resolve_base(reference: str, base_name: str, relative_to: Path | None) -> ResolvedCheckpoint:
    """Resolve an adapter's base model: a folder (absolute or beside the adapter) or a Hub id."""
    candidate = Path(base_name).expanduser()
    if relative_to is not None and not candidate.is_absolute():
        beside = relative_to / candidate
        if beside.is_dir() and (beside / "config.json").is_file():
            candidate = beside
    try:
        base = resolve_checkpoint(str(candidate) if candidate.is_dir() else base_name)
    except CheckpointError as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: its base model {base_name!r} cannot be resolved ({exc})"
        ) from exc
    if base.base is not None:
        raise CheckpointError(
            f"checkpoint {reference!r}: its base {base_name!r} is itself an adapter"
        )
    return base


def _check_safetensors(reference: str, file: Path) -> None:
    """Read a safetensors header and check the file holds every tensor it lists.

    A truncated or corrupt weight file is found here, before any checkpoint is
    computed, instead of after the earlier checkpoints of a sweep have run.
    """
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if size < 8 or length <= 0 or 8 + length > size:
                raise ValueError("header length out of range")
            header = json.loads(handle.read(length))
        ends = [
            entry["data_offsets"][1]
            for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict)
        ]
        if 8 + length + max(ends, default=0) > size:
            raise ValueError("file is shorter than its tensors")
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: cannot read weight file {file.name!r} "
            f"({exc.strerror or exc})"
        ) from None
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: corrupt weight file {file.name!r} ({exc})"
        ) from exc


def fingerprint_folder(path: Path) -> str:
    """SHA-256 over every file of :func:`identity_files`: each one's name (its bytes, any
    encoding), size and content, in full.

    Weights are hashed in full, read in 1 MiB blocks: a retrained checkpoint written
    over the same folder must not be mistaken for the old one by the result cache. The
    shard index, config, tokenizer files and chat templates are hashed as they are: each
    changes what loads or what a prompt is.

    Raises:
        OSError: a file that cannot be read (see :func:`_fingerprint`).
    """
    digest = hashlib.sha256()
    for file in identity_files(path):
        with file.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest.update(os.fsencode(file.name) + b"\0" + str(size).encode() + b"\0")
            read = 0
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
                read += len(block)
            if read != size:
                raise OSError(f"{os.fsdecode(file.name)!r} changed while it was read")
    return digest.hexdigest()


def _fingerprint(reference: str, path: Path) -> str:
    """:func:`fingerprint_folder`, with a file that cannot be read as one line naming the
    checkpoint and the file."""
    try:
        return fingerprint_folder(path)
    except OSError as exc:
        why = exc.strerror or str(exc)
        where = f" {os.fsdecode(exc.filename)!r}" if exc.filename else ""
        raise CheckpointError(f"checkpoint {reference!r}: cannot read{where} ({why})") from None


def _resolve_hub(reference: str, repo: str, revision: str | None) -> ResolvedCheckpoint:
    """Ask the Hub which commit ``repo@revision`` points at (a branch, tag, sha or step)."""
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a dependency
        raise CheckpointError(
            f"checkpoint {reference!r}: huggingface_hub is not installed"
        ) from exc
    try:
        info = HfApi().model_info(repo, revision=revision)
    except RevisionNotFoundError as exc:
        raise CheckpointError(f"checkpoint {reference!r}: revision {revision!r} not found") from exc
    except GatedRepoError as exc:
        raise CheckpointError(f"checkpoint {reference!r}: gated repository, log in first") from exc
    except RepositoryNotFoundError as exc:
        raise CheckpointError(f"checkpoint {reference!r}: no such repository on the Hub") from exc
    except Exception as exc:  # network down, offline mode, HTTP errors
        text = str(exc).strip()
        if "offline mode" in text:
            reason = "HF_HUB_OFFLINE is set"
        elif "NameResolution" in text or "Max retries" in text or "ConnectionError" in text:
            reason = "no network connection"
        else:
            reason = (text.split("\n")[0].strip() if text else type(exc).__name__)[:160]
        raise CheckpointError(f"checkpoint {reference!r}: cannot reach the Hub ({reason})") from exc
    commit = info.sha or revision or "unknown"
    siblings = {s.rfilename for s in (info.siblings or [])}
    if ADAPTER_CONFIG in siblings and "config.json" not in siblings:
        return _resolve_hub_adapter(reference, repo, revision, commit)
    return ResolvedCheckpoint(
        reference=reference,
        kind="hub",
        location=repo,
        revision=revision,
        identity=f"hub:{repo}@{commit}",
        commit=info.sha,
    )


def _resolve_hub_adapter(
    reference: str, repo: str, revision: str | None, commit: str
) -> ResolvedCheckpoint:
    """A Hub repository holding a PEFT adapter: pin its commit, then resolve its base."""
    from huggingface_hub import hf_hub_download

    try:
        config = hf_hub_download(repo, ADAPTER_CONFIG, revision=commit)
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: cannot download {ADAPTER_CONFIG} ({exc})"
        ) from exc
    base = _resolve_base(reference, _adapter_base(reference, Path(config)), relative_to=None)
    return ResolvedCheckpoint(
        reference=reference,
        kind="hub",
        location=repo,
        revision=revision,
        identity=f"hub:{repo}@{commit}+base={base.identity}",
        commit=commit,
        base=base,
    )

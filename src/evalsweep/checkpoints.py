"""Checkpoint references and the identities they resolve to.

A person names checkpoints the way they think of them: a local folder, a Hub
id (``org/name``) or a training step on the Hub (``org/name@step100000``).
Results must record exactly what was evaluated, so every reference is
resolved before any compute to an identity: the Hub commit sha, or for a
local folder a fingerprint of its config and weight files. Two references to
the same bytes share an identity, and so share cached results.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from evalsweep.errors import CheckpointError

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """What a reference points at, precisely enough to reproduce or cache on.

    Attributes:
        reference: the string the user gave.
        kind: ``"local"`` or ``"hub"``.
        location: absolute folder path, or the Hub repo id.
        revision: the revision asked for (Hub), or None.
        identity: ``hub:<repo>@<commit sha>`` or ``local:sha256:<fingerprint>``.
        commit: the resolved Hub commit sha, or None for local folders.
    """

    reference: str
    kind: str
    location: str
    revision: str | None
    identity: str
    commit: str | None = None

    @property
    def load_path(self) -> str:
        return self.location

    @property
    def load_revision(self) -> str | None:
        """Pin Hub loads to the resolved commit, so the weights match the identity."""
        return self.commit if self.kind == "hub" else None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def resolve_checkpoint(reference: str) -> ResolvedCheckpoint:
    """Resolve one reference; raise :class:`CheckpointError` naming it when it can't be."""
    reference = reference.strip()
    if not reference:
        raise CheckpointError("empty checkpoint reference")
    path = Path(reference).expanduser()
    if path.exists() or reference.startswith((".", "/", "~")):
        return _resolve_local(reference, path)
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
    config = path / "config.json"
    if not config.is_file():
        raise CheckpointError(f"checkpoint {reference!r}: no config.json in {path}")
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: {config} is not valid JSON ({exc})"
        ) from exc
    weights = sorted(p for pattern in WEIGHT_PATTERNS for p in path.glob(pattern))
    adapter = (path / "adapter_config.json").is_file()
    if not weights and not adapter:
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
        identity=f"local:sha256:{fingerprint_folder(path, weights)}",
    )


def _check_safetensors(reference: str, file: Path) -> None:
    """Read a safetensors header and check the file holds every tensor it lists.

    A truncated or corrupt weight file is found here, before any checkpoint is
    computed, instead of after the earlier checkpoints of a sweep have run.
    """
    size = file.stat().st_size
    try:
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
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(
            f"checkpoint {reference!r}: corrupt weight file {file.name} ({exc})"
        ) from exc


def fingerprint_folder(path: Path, weights: list[Path]) -> str:
    """Hash config, tokenizer and weight files' names and contents.

    Weights are hashed in full: a retrained checkpoint written over the same
    folder must not be mistaken for the old one by the result cache.
    """
    digest = hashlib.sha256()
    files = [path / name for name in CONFIG_FILES if (path / name).is_file()] + weights
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


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
            reason = (text.splitlines()[0] if text else type(exc).__name__)[:160]
        raise CheckpointError(f"checkpoint {reference!r}: cannot reach the Hub ({reason})") from exc
    commit = info.sha or revision or "unknown"
    return ResolvedCheckpoint(
        reference=reference,
        kind="hub",
        location=repo,
        revision=revision,
        identity=f"hub:{repo}@{commit}",
        commit=info.sha,
    )

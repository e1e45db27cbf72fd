"""SentencePiece-only tokenizers: read as SentencePiece, and proven to tokenize as it does.

A checkpoint whose tokenizer is only a ``tokenizer.model`` (no ``tokenizer.json``)
is converted to a fast tokenizer by transformers at load time, and the two
majors convert differently. transformers 5 needs the ``sentencepiece`` and
``protobuf`` packages to read the file; without either it silently falls back
to parsing the binary model as a tiktoken file (and fails, or worse). Where it
does read it, it drops the BOS default of Llama-style tokenizers whose config
does not spell ``add_bos_token``, reads unigram models as BPE, and ignores
``legacy``. transformers 4 has its own gaps (a SentencePiece normaliser that
collapses whitespace is not carried over).

So a SentencePiece-only tokenizer is used only once it has been checked
against SentencePiece itself, the checkpoint's own tokenizer:

- both packages must be importable, or the checkpoint is refused by name;
- the converted model type (BPE, unigram) must be SentencePiece's;
- probe texts (words, digits, repeated spaces, tabs, newlines, non-ASCII and
  byte-fallback characters, MMLU- and GSM8K-shaped prompts) must give
  SentencePiece's ids exactly; texts that start with whitespace are included
  unless the config asks for transformers' non-legacy handling
  (``legacy: false``), which both majors and lm-eval apply the same way;
- BOS and EOS must be added as the config says (``add_bos_token``,
  ``add_eos_token``), else as the tokenizer class always did.

Where transformers 5 gets the whitespace wrong, the SentencePiece rule
(spaces become ``▁``, one ``▁`` prepended where the model adds a dummy
prefix) is put back and checked again; where it gets BOS/EOS wrong, the
config's flags are set again. Anything still different is refused with a
one-line error naming the text, both tokenizations and the way out.
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any

from evalsweep.errors import CheckpointError

SPM_FILE = "tokenizer.model"
FAST_FILE = "tokenizer.json"

#: (add BOS, add EOS) of each SentencePiece tokenizer class when its config says nothing.
CLASS_SPECIALS = {
    "LlamaTokenizer": (True, False),
    "CodeLlamaTokenizer": (True, False),
    "GemmaTokenizer": (True, False),
    "T5Tokenizer": (False, True),
}

#: Texts every SentencePiece-only tokenizer must split exactly as SentencePiece does.
PROBES = (
    "The following are multiple choice questions (with answers) about high school mathematics.",
    "What is 3 + 4?\nA. 7\nB. 8\nC. 12\nD. 34\nAnswer: A\n\nFind x.\nAnswer:",
    "Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many"
    " clips in May.\nAnswer: 48/2 = <<48/2=24>>24 clips.\n#### 72",
    "two  spaces,   three and    four",
    "tab\there\t\tand\r\nCRLF",
    "line\n\n\nbreaks \n end",
    "ünïcödé — “quotes” 日本語 🙂 ½ × ∑ € ß",
    "$1,234.50 (25%) 3.14159 -7 1e-9",
    "x",
)
#: Probes starting with whitespace: split by the legacy (SentencePiece) rule unless the
#: config asks for transformers' non-legacy handling.
LEADING_PROBES = (" leading", "  two leading", "\nnewline first", " A")

_MODEL_TYPES = {1: "Unigram", 2: "BPE", 3: "WordLevel", 4: "WordLevel"}


def missing_packages() -> list[str]:
    """The packages reading a SentencePiece model needs that are not installed."""
    needed = {"sentencepiece": "sentencepiece", "protobuf": "google.protobuf"}
    return [name for name, module in needed.items() if not _importable(module)]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_packages(reference: str) -> None:
    missing = missing_packages()
    if missing:
        raise CheckpointError(
            f"checkpoint {reference!r}: its tokenizer is SentencePiece-only ({SPM_FILE}, no "
            f"{FAST_FILE}) and reading it needs {' and '.join(missing)} (pip install "
            f"{' '.join(missing)}); without it transformers misreads the file as tiktoken"
        )


def sentencepiece_only_source(path: str, revision: str | None) -> bool:
    """Whether a tokenizer source (a folder, a Hub repo's cached files) has only tokenizer.model."""
    folder = Path(path)
    if folder.is_dir():
        return (folder / SPM_FILE).is_file() and not (folder / FAST_FILE).is_file()
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        return False
    spm = try_to_load_from_cache(path, SPM_FILE, revision=revision)
    fast = try_to_load_from_cache(path, FAST_FILE, revision=revision)
    return isinstance(spm, str) and not isinstance(fast, str)


def loaded_sentencepiece_file(tokenizer: Any) -> Path | None:
    """The ``tokenizer.model`` a loaded tokenizer was converted from, without tokenizer.json."""
    vocab_file = getattr(tokenizer, "vocab_file", None) or tokenizer.init_kwargs.get("vocab_file")
    if not vocab_file:
        return None
    path = Path(str(vocab_file))
    if path.name != SPM_FILE or not path.is_file() or (path.parent / FAST_FILE).is_file():
        return None
    if tokenizer.init_kwargs.get("tokenizer_file"):
        return None
    return path


def _where(reference: str) -> str:
    return (
        f"checkpoint {reference!r}: its SentencePiece-only tokenizer ({SPM_FILE}, no {FAST_FILE})"
    )


def unreadable_error(reference: str, reason: str) -> CheckpointError:
    """The refusal of a SentencePiece-only tokenizer transformers cannot convert at all."""
    return CheckpointError(
        f"{_where(reference)} cannot be converted by transformers {_version()} ({reason}); "
        f"{_way_out()}"
    )


def check_sentencepiece_tokenizer(tokenizer: Any, reference: str) -> Any:
    """Check (and where it can, repair) a tokenizer converted from a SentencePiece model."""
    path = loaded_sentencepiece_file(tokenizer)
    if path is None:
        return tokenizer
    require_packages(reference)
    import sentencepiece

    proto = _model_proto(path)
    if proto is None:  # not a SentencePiece model (a tiktoken file, say): not ours to judge
        return tokenizer
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    where = _where(reference)
    way_out = _way_out()

    expected_type = _MODEL_TYPES.get(proto.trainer_spec.model_type, "?")
    backend = getattr(tokenizer, "backend_tokenizer", None)
    actual_type = type(backend.model).__name__ if backend is not None else "?"
    if actual_type != expected_type:
        raise CheckpointError(
            f"{where} is a {expected_type} model that transformers {_version()} reads as "
            f"{actual_type}; {way_out}"
        )

    config = _tokenizer_config(path)
    probes = list(PROBES)
    if config.get("legacy") is not False:
        probes += LEADING_PROBES
    mismatch = _first_mismatch(tokenizer, processor, probes)
    if mismatch is not None and _repair_whitespace(tokenizer, proto):
        mismatch = _first_mismatch(tokenizer, processor, probes)
    if mismatch is not None:
        text, ours, theirs = mismatch
        raise CheckpointError(
            f"{where} splits {text!r} into {ours} under transformers {_version()}, SentencePiece "
            f"into {theirs}; {way_out}"
        )

    _check_specials(tokenizer, processor, config, where, way_out)
    return tokenizer


def _tokenizer_config(path: Path) -> dict[str, Any]:
    """The checkpoint's tokenizer_config.json (what it asks for, not what a major defaults to)."""
    import json

    config_file = path.parent / "tokenizer_config.json"
    if not config_file.is_file():
        return {}
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _model_proto(path: Path) -> Any:
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]
    try:
        proto.ParseFromString(path.read_bytes())
    except DecodeError:
        return None
    if not proto.pieces:
        return None
    return proto


def _first_mismatch(
    tokenizer: Any, processor: Any, probes: list[str]
) -> tuple[str, list[int], list[int]] | None:
    for text in probes:
        ours = list(tokenizer.encode(text, add_special_tokens=False))
        theirs = list(processor.encode(text))
        if ours != theirs:
            return text, ours, theirs
    return None


def _repair_whitespace(tokenizer: Any, proto: Any) -> bool:
    """Put SentencePiece's whitespace rule back (transformers 5 drops ``legacy``)."""
    from tokenizers import normalizers

    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = proto.normalizer_spec
    if backend is None or spec.remove_extra_whitespaces or spec.name not in ("identity", ""):
        return False  # a normaliser the fast tokenizer cannot reproduce: refuse instead
    steps = [normalizers.Prepend("▁")] if spec.add_dummy_prefix else []
    backend.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    backend.pre_tokenizer = None
    return True


def _check_specials(
    tokenizer: Any, processor: Any, config: dict[str, Any], where: str, way_out: str
) -> None:
    name = str(config.get("tokenizer_class") or type(tokenizer).__name__).removesuffix("Fast")
    defaults = CLASS_SPECIALS.get(name)
    wanted = []
    for index, key in enumerate(("add_bos_token", "add_eos_token")):
        if key in config and config[key] is not None:
            wanted.append(bool(config[key]))
        elif defaults is not None:
            wanted.append(defaults[index])
        elif _version_major() >= 5:
            raise CheckpointError(
                f"{where} does not say whether it adds {key[4:7].upper()} ({key}) and "
                f"transformers 5 no longer applies its class {name}'s default; {way_out}"
            )
        else:
            return  # transformers 4 applies the class's own default, as lm-eval sees it
    add_bos, add_eos = wanted
    expected = _with_specials(processor, tokenizer, add_bos, add_eos)
    if list(tokenizer.encode("x")) != expected:
        for key, value in (("add_bos_token", add_bos), ("add_eos_token", add_eos)):
            with contextlib.suppress(AttributeError, ValueError):
                setattr(tokenizer, key, value)
    actual = list(tokenizer.encode("x"))
    if actual != expected:
        raise CheckpointError(
            f"{where} encodes 'x' as {actual} under transformers {_version()}, but its config "
            f"(add_bos_token={add_bos}, add_eos_token={add_eos}) means {expected}; {way_out}"
        )


def _with_specials(processor: Any, tokenizer: Any, add_bos: bool, add_eos: bool) -> list[int]:
    ids = list(processor.encode("x"))
    if add_bos and tokenizer.bos_token_id is not None:
        ids = [int(tokenizer.bos_token_id), *ids]
    if add_eos and tokenizer.eos_token_id is not None:
        ids = [*ids, int(tokenizer.eos_token_id)]
    return ids


def _version() -> str:
    import transformers

    return str(transformers.__version__)


def _version_major() -> int:
    return int(_version().split(".")[0])


def _way_out() -> str:
    return (
        "save a tokenizer.json beside it with transformers 4 "
        "(AutoTokenizer.from_pretrained(path).save_pretrained(path)) to pin its tokenization"
    )

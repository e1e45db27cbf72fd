"""What a checkpoint's attention needs, and which of the HF backend's fast paths are exact for it.

A fast path computes the same answers as a plain transformers computation by
a different route (a shared few-shot prefix computed once; a hand-written
decode loop over a reserved key/value cache). Each declares the attention
features it is exact for; the backend reads the checkpoint's features from
its config and uses a fast path only where every feature is declared, and
the plain path otherwise. Which path served is part of the result's
provenance.

Features:
- ``full``: full causal attention on every layer;
- ``sliding-window``: some or all layers see only the last W positions (Mistral,
  Mixtral, Starcoder2, Phi-3, Gemma 2/3's local layers, GPT-Neo's local layers);
- ``mixed-layers``: local and global layers alternate (Gemma 2/3, GPT-Neo);
- ``soft-capping``: attention scores or final logits pass through ``c * tanh(x / c)``;
- ``mixture-of-experts``: a router sends each token to some experts;
- ``recurrent``: a state-space or recurrent block whose cache is not keys and values;
- ``chunked``: chunked local attention (Llama 4).

The plain paths are a full forward of each whole input with no cache (for
log-likelihoods) and the model's own cache, one prompt at a time (for
generation): what ``model(...)`` and ``model.generate`` do.

A model type joins ``VERIFIED_MODEL_TYPES`` only when the architecture matrix
(``tests/test_models_arch_matrix.py``) proves every fast path it takes exact; any
other model type (custom code included) is served by the plain paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

PREFIX_REUSE = "prefix-reuse"
FULL_FORWARD = "full-forward"
RESERVED_DECODE = "reserved-decode"  # 4-D additive mask kept ready across steps
RESERVED_DECODE_MASKED = "reserved-decode-masked"  # 2-D mask; transformers builds each layer's
PLAIN_DECODE = "plain-decode"

#: Model types whose every fast path the architecture matrix checks against the plain path.
VERIFIED_MODEL_TYPES = frozenset(
    {
        "gpt2", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral", "mixtral", "qwen2",
        "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "phi", "phi3",
        "olmo2", "falcon", "starcoder2", "granite", "cohere", "stablelm",
    }
)  # fmt: skip

#: Model types whose blocks keep a recurrent state rather than (only) keys and values.
RECURRENT_MARKERS = ("mamba", "rwkv", "jamba", "zamba", "recurrent", "xlstm", "lfm2", "next")


@dataclass(frozen=True)
class Attention:
    """The attention features of one checkpoint, read from its config."""

    model_type: str
    layer_types: tuple[str, ...]
    window: int | None
    soft_capping: bool
    experts: int | None
    features: frozenset[str] = field(default_factory=frozenset)
    #: The model class is transformers' own, not code shipped with the checkpoint.
    native: bool = True

    @classmethod
    def from_model(cls, model: Any) -> Attention:
        """The features of a loaded model: its config, and whether its code is transformers'."""
        native = type(model).__module__.startswith("transformers.models.")
        return replace(cls.from_config(model.config), native=native)

    @classmethod
    def from_config(cls, config: Any) -> Attention:
        config = getattr(config, "text_config", None) or config
        model_type = str(getattr(config, "model_type", "") or "unknown")
        layers = int(
            getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 0
        )
        window = _window(config)
        types = _layer_types(config, layers, window)
        soft = any(
            getattr(config, name, None)
            for name in ("attn_logit_softcapping", "final_logit_softcapping", "logit_softcapping")
        )
        experts = _experts(config)
        features = set()
        kinds = set(types)
        if "sliding_attention" in kinds:
            features.add("sliding-window")
        if "chunked_attention" in kinds or getattr(config, "attention_chunk_size", None):
            features.add("chunked")
        if kinds - {"sliding_attention", "full_attention", "chunked_attention"} or any(
            marker in model_type for marker in RECURRENT_MARKERS
        ):
            features.add("recurrent")
        if len(kinds) > 1:
            features.add("mixed-layers")
        if soft:
            features.add("soft-capping")
        if experts:
            features.add("mixture-of-experts")
        if not features - {"soft-capping", "mixture-of-experts"}:
            features.add("full")
        return cls(model_type, types, window, soft, experts, frozenset(features))

    @property
    def windowed(self) -> bool:
        return "sliding-window" in self.features

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "model_type": self.model_type,
            "features": sorted(self.features),
        }
        if self.window is not None and self.windowed:
            out["sliding_window"] = self.window
        if self.experts:
            out["experts"] = self.experts
        return out


@dataclass(frozen=True)
class FastPath:
    """A faster route to the plain path's answers, and the features it is exact for."""

    name: str
    supports: frozenset[str]

    def refusal(self, attention: Attention) -> str | None:
        """Why this path cannot serve ``attention`` exactly, or None when it can."""
        if not attention.native:
            return "the model's code is the checkpoint's own, not transformers'"
        if attention.model_type not in VERIFIED_MODEL_TYPES:
            return f"model type {attention.model_type!r} is not in the verified matrix"
        missing = sorted(attention.features - self.supports)
        if missing:
            return f"not exact for {', '.join(missing)}"
        return None


# Prefix reuse hands transformers a cache holding every prefix position (never a
# sliding layer's truncated one), so transformers' own masks apply each layer's
# window to the suffix exactly as in a full forward.
PREFIX_REUSE_PATH = FastPath(
    PREFIX_REUSE,
    frozenset({"full", "sliding-window", "mixed-layers", "soft-capping", "mixture-of-experts"}),
)
# One 4-D additive mask for every layer: exact only when every layer is full causal.
RESERVED_DECODE_PATH = FastPath(
    RESERVED_DECODE, frozenset({"full", "soft-capping", "mixture-of-experts"})
)
# A 2-D padding mask: transformers builds each layer's own (windowed or full) mask
# over the reserved cache, which keeps every position.
RESERVED_DECODE_MASKED_PATH = FastPath(
    RESERVED_DECODE_MASKED,
    frozenset({"full", "sliding-window", "mixed-layers", "soft-capping", "mixture-of-experts"}),
)


@dataclass(frozen=True)
class Plan:
    """The paths chosen for one checkpoint, with the reasons fast paths were not."""

    attention: Attention
    loglikelihood: str
    generation: str
    notes: tuple[str, ...]

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {
            "attention": self.attention.summary(),
            "loglikelihood": self.loglikelihood,
            "generation": self.generation,
        }
        if self.notes:
            out["plain_because"] = list(self.notes)
        return out


def plan(attention: Attention, prefix_reuse: bool = True, dtype: str = "float32") -> Plan:
    """Pick each request kind's path for a checkpoint with ``attention`` run in ``dtype``.

    The batched decode loops are exact only in float32: in bfloat16 or float16 a batch's
    matrix products round differently from one prompt's, and greedy decoding turns a
    rounding difference at a near-tie into a different token (the architecture matrix
    saw this), so half precision generates one prompt at a time, as ``generate`` does.
    """
    notes = []
    loglikelihood = FULL_FORWARD
    if prefix_reuse:
        reason = PREFIX_REUSE_PATH.refusal(attention)
        if reason is None:
            loglikelihood = PREFIX_REUSE
        else:
            notes.append(f"{PREFIX_REUSE}: {reason}")
    generation = PLAIN_DECODE
    for path in (RESERVED_DECODE_PATH, RESERVED_DECODE_MASKED_PATH):
        reason = path.refusal(attention)
        if reason is None:
            generation = path.name
            break
    if generation == PLAIN_DECODE:
        notes.append(f"{RESERVED_DECODE_MASKED}: {RESERVED_DECODE_MASKED_PATH.refusal(attention)}")
    elif dtype != "float32":
        notes.append(f"{generation}: batched decoding is exact in float32 only, not {dtype}")
        generation = PLAIN_DECODE
    return Plan(attention, loglikelihood, generation, tuple(notes))


def _window(config: Any) -> int | None:
    for name in ("sliding_window", "window_size", "attention_window"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _layer_types(config: Any, layers: int, window: int | None) -> tuple[str, ...]:
    declared = getattr(config, "layer_types", None)
    if declared:
        return tuple(str(kind) for kind in declared)
    gpt_neo = getattr(config, "attention_layers", None)  # GPT-Neo: "global" / "local"
    if gpt_neo:
        return tuple("sliding_attention" if k == "local" else "full_attention" for k in gpt_neo)
    if window is not None and getattr(config, "use_sliding_window", True):
        return ("sliding_attention",) * max(1, layers)
    return ("full_attention",) * max(1, layers)


def _experts(config: Any) -> int | None:
    for name in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 1:
            return value
    return None


__all__ = [
    "FULL_FORWARD",
    "PLAIN_DECODE",
    "PREFIX_REUSE",
    "RESERVED_DECODE",
    "RESERVED_DECODE_MASKED",
    "Attention",
    "FastPath",
    "Plan",
    "plan",
]

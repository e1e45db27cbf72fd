"""Prompts rendered with each checkpoint's chat template (``--apply-chat-template``).

A chat template belongs to the checkpoint (its tokenizer), so the same task
gives each checkpoint a different prompt: the engine renders every
document's turns per checkpoint, before any model is loaded, the way
lm-evaluation-harness's ``--apply_chat_template`` does:

- the description (and ``--system-instruction``) is a system message;
- few-shot examples are folded into one user message, or with
  ``--fewshot-as-multiturn`` kept as user/assistant turns;
- the template is applied with ``add_generation_prompt=True``, and
  multiple-choice continuations lose their leading target delimiter.

Tasks stay unaware of templates and backends: they only give their prompt as
turns (:class:`evalsweep.tasks.ChatPrompt`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import CheckpointError, TaskError
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, Request
from evalsweep.tasks import PreparedDocument
from evalsweep.tasks._base import Turn

Template = Callable[[list[dict[str, str]]], str]


@dataclass(frozen=True)
class ChatOptions:
    """``--apply-chat-template``, ``--fewshot-as-multiturn`` and ``--system-instruction``."""

    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = False
    system_instruction: str | None = None

    @classmethod
    def from_flags(
        cls, apply: bool, multiturn: bool | None, system_instruction: str | None
    ) -> ChatOptions:
        """lm-eval's rules: multi-turn few-shot is the default with a template, and needs one."""
        if multiturn and not apply:
            raise TaskError("--fewshot-as-multiturn needs --apply-chat-template")
        return cls(apply, apply if multiturn is None else multiturn, system_instruction or None)

    @property
    def active(self) -> bool:
        return self.apply_chat_template or bool(self.system_instruction)

    def settings(self) -> dict[str, Any]:
        """What goes into the task settings key (nothing when inactive, so old rows match)."""
        if not self.active:
            return {}
        return {
            "apply_chat_template": self.apply_chat_template,
            "fewshot_as_multiturn": self.fewshot_as_multiturn,
            "system_instruction": self.system_instruction,
        }


def load_chat_template(checkpoint: ResolvedCheckpoint, trust_remote_code: bool) -> Template:
    """The checkpoint's chat template as a function of messages; a clear error if it has none."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            checkpoint.load_path,
            revision=checkpoint.load_revision,
            trust_remote_code=trust_remote_code,
        )
    except Exception as exc:
        first = str(exc).strip().split("\n")[0].strip() if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {checkpoint.reference!r}: cannot load its tokenizer ({first})"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise CheckpointError(
            f"checkpoint {checkpoint.reference!r}: its tokenizer has no chat template; "
            "run it without --apply-chat-template"
        )

    def render(messages: list[dict[str, str]]) -> str:
        import jinja2

        def apply(chat: list[dict[str, str]]) -> str:
            return str(
                tokenizer.apply_chat_template(
                    chat, tokenize=False, add_generation_prompt=True, continue_final_message=False
                )
            )

        try:
            return apply(messages)
        except jinja2.TemplateError:
            # As lm-eval: a template that refuses system messages gets the chat without them.
            try:
                return apply([m for m in messages if m["role"] != "system"])
            except jinja2.TemplateError as exc:
                raise CheckpointError(
                    f"checkpoint {checkpoint.reference!r}: its chat template fails ({exc})"
                ) from exc

    return render


def with_system_instruction(turns: Sequence[Turn], instruction: str | None) -> list[Turn]:
    """lm-eval's ``maybe_delimit(system_instruction, description, "\\n\\n")`` as the system turn."""
    turns = list(turns)
    if not instruction:
        return turns
    if turns and turns[0].role == "system":
        description = turns[0].content
        joined = (
            instruction + "\n\n" + description
            if description and not (instruction[-1].isspace() or description[0].isspace())
            else instruction + description
        )
        return [Turn("system", joined), *turns[1:]]
    return [Turn("system", instruction), *turns]


def single_turn(turns: Sequence[Turn]) -> list[dict[str, str]]:
    """lm-eval's ``multiturn_to_singleturn``: the system turn, then one user turn."""
    system = [turns[0]] if turns and turns[0].role == "system" else []
    rest = list(turns[len(system) :])
    text = "".join(t.content + t.delimiter for t in rest[:-1]) + rest[-1].content
    messages = [{"role": "system", "content": system[0].content}] if system else []
    return [*messages, {"role": "user", "content": text}]


def multi_turn(turns: Sequence[Turn]) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.content} for t in turns]


def render_documents(
    task: str,
    prepared: Sequence[PreparedDocument],
    options: ChatOptions,
    template: Template | None,
) -> list[PreparedDocument]:
    """Each document's requests with its prompt rendered for one checkpoint."""
    rendered = []
    for item in prepared:
        if item.chat is None:
            raise TaskError(
                f"{task}: this task does not support --apply-chat-template or --system-instruction"
            )
        turns = with_system_instruction(item.chat.turns, options.system_instruction)
        if template is None:  # --system-instruction alone: plain text, as lm-eval
            context = "".join(t.content + t.delimiter for t in turns)
        else:
            messages = multi_turn(turns) if options.fewshot_as_multiturn else single_turn(turns)
            context = template(messages)
        requests: list[Request] = []
        for index, request in enumerate(item.requests):
            if isinstance(request, LoglikelihoodRequest):
                continuation = (
                    request.continuation if template is None else item.chat.continuations[index]
                )
                requests.append(LoglikelihoodRequest(context, continuation))
            else:
                assert isinstance(request, GenerationRequest)
                requests.append(replace(request, context=context))
        rendered.append(replace(item, requests=tuple(requests)))
    return rendered

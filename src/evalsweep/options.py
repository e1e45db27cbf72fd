"""A sweep's options, defined once: ``evalsweep run``'s flags, the spec, job and remote argv.

Every option of ``evalsweep run`` is one :class:`Option` in :data:`OPTIONS`: its flag,
type, default and help, which object it lands in, whether it travels to a remote
run (it changes the work) and under which name an agent may set it. From that one
table come

- the click options of ``evalsweep run`` (:func:`click_options`),
- the :class:`~evalsweep.engine.SweepSpec` built from parsed values (:func:`build_spec`),
- the command line of the same sweep on another machine or in a background job
  (:func:`to_argv`) and its reading back (:func:`from_argv`, click's own parser),
- the MCP ``quote_sweep`` parameters an agent may set (:func:`agent_options`).

A new option is one entry here (and a field in the object it lands in); the tests
of ``tests/test_options_contract.py`` fail for a ``SweepSpec``, ``BackendOptions``
or ``ChatOptions`` field without an entry, or an entry whose default is not its
field's. Nothing heavy is imported at module level: the CLI reads this table
when it starts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from evalsweep.dtypes import DTYPE_CHOICES
from evalsweep.errors import ConfigError
from evalsweep.secrets import is_setting_name

if TYPE_CHECKING:
    from evalsweep.engine import SweepSpec

#: Where a parsed value goes: a ``SweepSpec`` field, a ``BackendOptions`` field, a
#: ``ChatOptions`` field, the code tasks' sampling (``HumanEval``/``MBPP``), the job
#: (``baseline``: which checkpoint the others are compared with), the choice of a
#: training run's checkpoints (``selection``: made here, before the references
#: travel), or only this process (where results go and how they are shown).
Lands = Literal["spec", "backend", "chat", "code", "job", "selection", "presentation"]
#: How a value is written and read: ``text``, ``int``, ``float``, ``folder``, ``file``,
#: ``flag`` (present or not), ``switch`` (``--x/--no-x``; ``None`` when neither),
#: ``batch`` (a number or ``auto``), ``ks`` (comma-separated whole numbers).
Kind = Literal["text", "int", "float", "folder", "file", "flag", "switch", "batch", "ks"]


@dataclass(frozen=True)
class Option:
    """One option of ``evalsweep run``.

    Attributes:
        name: the parsed value's name (click's parameter name, a key of the values).
        flag: the long flag; a ``switch`` also has ``--no-`` and the rest of it.
        kind: how the value is written and read (:data:`Kind`).
        default: the value when the flag is absent, in the object's own form
            (``None`` for ``--batch-size auto``); equal to the field's default.
        help: the help line.
        lands: the object the value goes to (:data:`Lands`).
        field: the attribute in that object (default: ``name``).
        travels: it changes the work, so a remote run or a job gets it.
        agent: the MCP ``quote_sweep`` parameter that sets it; ``None``: agents cannot.
        agent_help: that parameter's description.
        minimum: the smallest value (numbers only), on the command line, in a written
            argv and from an agent alike.
        maximum: the largest value (numbers only), likewise. A float is also finite.
        agent_maximum: a lower ceiling for an agent's value (what one quote may ask).
        pattern: the whole form a text value must have (a regular expression), on the
            command line, in a written argv and from an agent alike; ``pattern_help``
            says it in words.
    """

    name: str
    flag: str
    kind: Kind
    default: Any
    help: str
    lands: Lands
    field: str = ""
    travels: bool = False
    agent: str | None = None
    agent_help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    agent_maximum: float | None = None
    pattern: str | None = None
    pattern_help: str = ""
    short: str | None = None
    envvar: str | None = None
    show_default: bool = False
    hidden: bool = False
    required: bool = False

    @property
    def attribute(self) -> str:
        return self.field or self.name

    @property
    def negative(self) -> str:
        """A switch's ``--no-...`` flag."""
        return "--no-" + self.flag.removeprefix("--")


def _o(
    name: str, flag: str, kind: Kind, default: Any, help: str, lands: Lands, **kw: Any
) -> Option:
    travels = lands in ("spec", "backend", "chat", "code", "job")
    return Option(name, flag, kind, default, help, lands, travels=travels, **kw)


#: Every option of ``evalsweep run``, in the order ``--help`` lists them.
OPTIONS: tuple[Option, ...] = (
    _o("tasks", "--tasks", "text", None, "Comma-separated tasks (mmlu, gsm8k, arc_easy, "
       "hellaswag...; `evalsweep tasks`), suites (leaderboard: its six tasks at their "
       "few-shot counts) or task files (my_task.yaml).", "spec",
       short="-t", required=True),
    _o("data_dir", "--data-dir", "folder", None, "Local benchmark data laid out like the "
       "originals (default: the Hugging Face Hub). Env: EVALSWEEP_DATA_DIR.", "spec",
       envvar="EVALSWEEP_DATA_DIR"),
    _o("limit", "--limit", "int", None, "First N documents per task (per MMLU subject).",
       "spec", agent="limit", minimum=1,
       agent_help="Only the first N documents of each task (a small trial)"),
    _o("num_fewshot", "--num-fewshot", "int", None, "Few-shot examples (default: the "
       "task's, 5).", "spec", agent="num_fewshot", minimum=0, agent_maximum=100,
       agent_help="Few-shot examples per prompt (default: each task's own)"),
    _o("backend", "--backend", "text", "hf", "Model backend: one that `evalsweep "
       "backends` lists (evalsweep's own or an installed package's).", "spec",
       show_default=True),
    _o("device", "--device", "text", "auto", "cpu, cuda, cuda:N or auto.", "backend",
       show_default=True, pattern=r"auto|cpu|cuda|cuda:[0-9]{1,3}",
       pattern_help="auto, cpu, cuda or cuda:N", agent="gpu",
       agent_help="On 'local' only: the device, cpu, cuda or cuda:N (default: what is "
       "there). Other targets run on their configured hardware."),
    _o("dtype", "--dtype", "text", "auto", f"{DTYPE_CHOICES}.", "backend",
       show_default=True),
    _o("batch_size", "--batch-size", "batch", None, "Rows per batch, or auto.", "backend",
       show_default=True),
    _o("trust_remote_code", "--trust-remote-code", "flag", False,
       "Allow checkpoints with custom code.", "backend"),
    _o("max_length", "--max-length", "int", None, "Context length (vLLM: max_model_len).",
       "backend", minimum=1),
    _o("prefix_reuse", "--prefix-reuse", "switch", True, "hf: compute a few-shot prefix "
       "shared by many prompts once (the same answers, faster).",
       "backend", show_default=True),
    _o("tensor_parallel_size", "--tensor-parallel-size", "int", 1, "vllm: GPUs per model.",
       "backend", show_default=True, minimum=1),
    _o("data_parallel_size", "--data-parallel-size", "int", 1, "vllm: model replicas.",
       "backend", show_default=True, minimum=1),
    _o("gpu_memory_utilization", "--gpu-memory-utilization", "float", None, "vllm on a GPU: "
       "share of GPU memory it may take.", "backend", minimum=0.0, maximum=1.0),
    _o("kv_cache_space", "--kv-cache-space", "float", None, "vllm's CPU build: GiB of KV "
       "cache, shared by the --data-parallel-size engines (default: what the model can use, "
       "up to 4 GiB each, within the NUMA node's free memory).", "backend", minimum=0.0),
    _o("enforce_eager", "--enforce-eager", "flag", False, "vllm: skip graph compilation "
       "(faster start).", "backend"),
    _o("base_url", "--base-url", "text", None, "openai: the server's API root, e.g. "
       "http://127.0.0.1:8000/v1.", "backend"),
    _o("model_name", "--model", "text", None, "openai: served model name (default: asked "
       "of it).", "backend"),
    _o("api_key_env", "--api-key-env", "text", None, "openai: environment variable holding "
       "the API key.", "backend"),
    _o("concurrency", "--concurrency", "int", 8, "openai: calls in flight.", "backend",
       show_default=True, minimum=1),
    _o("max_retries", "--max-retries", "int", 5, "openai: retries of a failed call.",
       "backend", show_default=True, minimum=0),
    _o("timeout", "--request-timeout", "float", 300.0, "openai: seconds one call may take.",
       "backend", show_default=True, minimum=0.0),
    _o("apply_chat_template", "--apply-chat-template", "flag", False, "Render prompts with "
       "each checkpoint's chat template (as lm-eval's).", "chat"),
    _o("fewshot_as_multiturn", "--fewshot-as-multiturn", "switch", None, "Few-shot examples "
       "as user/assistant turns (default: on with --apply-chat-template).", "chat"),
    _o("system_instruction", "--system-instruction", "text", None, "A system message put "
       "before the task's prompt.", "chat"),
    _o("store", "--store", "file", None, "SQLite results store (default "
       "~/.local/share/evalsweep/results.sqlite).", "presentation", envvar="EVALSWEEP_STORE"),
    _o("out", "--out", "folder", None, "Write results.json and samples.jsonl here.",
       "presentation"),
    _o("samples_per_problem", "--samples-per-problem", "int", 1, "Code tasks (humaneval, "
       "mbpp): completions per problem, for pass@k.", "code", field="samples",
       show_default=True, minimum=1),
    _o("temperature", "--temperature", "float", 0.0, "Code tasks: sampling temperature "
       "(needed when sampling several completions).", "code", show_default=True, minimum=0.0),
    _o("ks", "--k", "ks", (1, 10, 100), "Code tasks: pass@k values.", "code",
       show_default=True),
    _o("expect_identities", "--expect-identities", "text", None, "The identities the "
       "checkpoints must resolve to, in order, separated by spaces (an approved job's).",
       "spec", hidden=True),
    _o("expect_work", "--expect-work", "text", None, "The hash the planned sweep's work must "
       "have (an approved job's).", "spec", hidden=True),
    _o("pinned", "--pinned", "text", None, "The checkpoints exactly as given, in this order: "
       "no run expanded, none reordered; the value is each one's training step or '-', "
       "separated by spaces (an approved job's).", "presentation", hidden=True,
       pattern=r"(?:[0-9]{1,12}|-)(?: (?:[0-9]{1,12}|-))*",
       pattern_help="a training step or '-' for each checkpoint, separated by spaces"),
    _o("baseline", "--baseline", "text", None, "Checkpoint the others are compared with "
       "(default: the first).", "job"),
    _o("steps", "--steps", "text", None, "From a run (a folder of checkpoint-N folders, or "
       "org/model@step*): steps A to B, both included, every STRIDE steps (A:B[:STRIDE]; "
       "A or B may be empty).", "selection", agent="steps",
       pattern=r"[0-9]{0,12}:[0-9]{0,12}(?::[0-9]{1,12})?",
       pattern_help="A:B or A:B:STRIDE (whole numbers; A or B may be empty)",
       agent_help="From a run (an allowed run folder, or org/model@step*): steps A to B, "
       "both included, every STRIDE steps: A:B or A:B:STRIDE (A or B may be empty)"),
    _o("every", "--every", "int", None, "From a run: every N-th checkpoint, the first "
       "included.", "selection", minimum=1, agent="every",
       agent_help="From a run: every N-th checkpoint (after steps), the first included"),
    _o("last", "--last", "int", None, "From a run: the last K checkpoints.", "selection",
       minimum=1, agent="last",
       agent_help="From a run: the last K checkpoints (after steps and every)"),
    _o("best_by", "--best-by", "text", None, "A run's best checkpoint by these tasks "
       "(comma-separated; default: every task): the highest mean of their headline scores, "
       "tested against each other checkpoint.", "presentation"),
    _o("subjects", "--subjects", "flag", False, "Also show MMLU per subject (significant "
       "first).", "presentation"),
    _o("fail_on_regression", "--fail-on-regression", "flag", False, "Exit with status 3 if "
       "any verdict is a regression.", "presentation"),
    _o("target", "--target", "text", "local", "Where the sweep runs: local, a [targets.NAME] "
       "of the configuration, ssh://user@host[:port], ray://host:port or skypilot:GPU "
       "(`evalsweep targets` lists them).", "presentation", show_default=True,
       envvar="EVALSWEEP_TARGET"),
    _o("as_json", "--json", "flag", False, "Print the result document as JSON.",
       "presentation"),
    _o("progress_lines", "--progress-lines", "flag", False, "Progress as JSON lines.",
       "presentation", hidden=True),
    _o("env_stdin", "--env-stdin", "flag", False, "Read secret environment variables from "
       "stdin.", "presentation", hidden=True),
    _o("debug", "--debug", "flag", False, "Show tracebacks.", "presentation"),
)  # fmt: skip

BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}


def option(name: str) -> Option:
    """The definition of option ``name``."""
    return BY_NAME[name]


# -- values as written and read ---------------------------------------------------------


def batch_size(value: str | int | None) -> int | None:
    """``--batch-size``: a whole number of at least 1, or ``auto`` (``None``)."""
    if value is None or value == "auto":
        return None
    try:
        size = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'auto'") from None
    if size < 1:
        raise click.BadParameter("must be at least 1")
    return size


def k_values(ks: str | Sequence[int]) -> tuple[int, ...]:
    """``--k 1,10,100`` as numbers; each k is a whole number of at least 1."""
    if not isinstance(ks, str):
        return tuple(ks)
    try:
        values = tuple(int(k) for k in ks.split(",") if k.strip())
    except ValueError:
        raise click.BadParameter(f"--k {ks!r} is not a comma-separated list of numbers") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"--k {ks!r}: each k must be at least 1")
    return values


def task_list(tasks: str) -> list[str]:
    """``--tasks a,b`` as names (blank entries dropped)."""
    return [t.strip() for t in tasks.split(",") if t.strip()]


def tasks_value(names: Sequence[str]) -> str:
    """Task names (or task-file paths) as one ``--tasks`` value that :func:`task_list`
    reads back as exactly these names, or a one-line error naming the entry.

    Raises:
        ConfigError: an entry holding a comma or NUL, blank, or with white space (any
            Unicode space or line separator) at either end: read back it would be
            another task, or several.
    """
    for index, name in enumerate(names):
        if "\x00" in name or task_list(name) != [name]:
            raise ConfigError(
                f"tasks[{index}]: cannot be written as evalsweep run arguments that read back "
                "the same (a comma, a NUL, blank, or white space at an end); rename the task file"
            )
    return ",".join(names)


def number_problem(option: Option, value: Any, *, agent: bool = False) -> str | None:
    """What is wrong with ``value`` for the number option ``option`` (its declared bounds,
    and a float is finite), or ``None``. The one check the command line, a written argv
    and an agent's arguments share; ``agent``: an agent's bounds (``agent_maximum`` too),
    worded for an agent."""
    if value is None or option.kind not in ("int", "float"):
        return None
    if option.kind == "float" and not math.isfinite(value):
        return "must be a finite number"
    low = option.minimum
    high = option.agent_maximum if agent and option.agent_maximum is not None else option.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            return f"must be {low:g} or more" if agent else f"must be at least {low:g}, got {value}"
        if low is None:
            return f"must be {high:g} or less"
        return f"must be between {low:g} and {high:g}" + ("" if agent else f", got {value}")
    return None


def text_problem(option: Option, value: Any) -> str | None:
    """What is wrong with ``value`` for a text option that declares a ``pattern`` (its whole
    form), or ``None``; the value itself is never repeated (it may hold anything)."""
    if option.pattern is None or value is None:
        return None
    if not isinstance(value, str) or re.fullmatch(option.pattern, value) is None:
        return f"must be {option.pattern_help}"
    return None


def value_problem(option: Option, value: Any) -> str | None:
    """The one check of a value of ``option``: its number bounds or its text form."""
    return number_problem(option, value) or text_problem(option, value)


def _written(option: Option, value: Any) -> list[str]:
    """``option`` with ``value`` as command-line words; nothing for its default."""
    if option.kind == "flag":
        return [option.flag] if value else []
    if option.kind == "switch":
        if value is None or value == option.default:
            return []
        return [option.flag if value else option.negative]
    if value is None or _same(value, option.default):
        return []
    if option.kind == "ks":
        return [option.flag, ",".join(str(k) for k in value)]
    if option.kind == "float":
        return [option.flag, repr(float(value))]
    return [option.flag, str(value)]


# -- click ------------------------------------------------------------------------------


def _click_option(option: Option) -> Callable[[Any], Any]:
    names = [option.flag] + ([option.short] if option.short else [])
    settings: dict[str, Any] = {
        "help": option.help,
        "hidden": option.hidden,
        "show_default": option.show_default,
        "required": option.required,
    }
    if option.envvar:
        settings["envvar"] = option.envvar
    if option.kind == "flag":
        return click.option(*names, option.name, is_flag=True, **settings)
    if option.kind == "switch":
        names[0] = f"{option.flag}/{option.negative}"
        return click.option(*names, option.name, default=option.default, **settings)
    if option.kind == "batch":
        return click.option(
            *names, option.name, default="auto", callback=lambda _c, _p, v: batch_size(v),
            **settings,
        )  # fmt: skip
    if option.kind == "ks":
        written = ",".join(str(k) for k in option.default)
        return click.option(
            *names, option.name, default=written, callback=lambda _c, _p, v: k_values(v),
            **settings,
        )  # fmt: skip
    kinds: dict[str, Any] = {
        "text": str,
        "int": int,
        "float": float,
        "folder": click.Path(file_okay=False, path_type=Path),
        "file": click.Path(dir_okay=False, path_type=Path),
    }
    return click.option(*names, option.name, type=kinds[option.kind], default=option.default,
                        **settings)  # fmt: skip


def click_option(name: str, **changes: Any) -> Callable[[Any], Any]:
    """The click option of ``name``, with ``changes`` (another ``help``) for another command."""
    from dataclasses import replace

    return _click_option(replace(BY_NAME[name], **changes))


def click_options(
    names: Iterable[str] | None = None, *, environment: bool = True
) -> Callable[[Any], Any]:
    """A decorator adding the options ``names`` (default: all of ``evalsweep run``'s).

    ``environment=False``: no value comes from an environment variable (reading a
    command line as words only).
    """
    from dataclasses import replace

    chosen = [BY_NAME[name] for name in names] if names is not None else list(OPTIONS)
    if not environment:
        chosen = [replace(each, envvar=None) for each in chosen]

    def decorate(command: Any) -> Any:
        for each in reversed(chosen):
            command = _click_option(each)(command)
        return command

    return decorate


@click.command("run")
@click.argument("checkpoints", nargs=-1, required=True)
@click_options((o.name for o in OPTIONS if o.travels), environment=False)
def _reader(**values: Any) -> None:
    """What :func:`from_argv` parses with: the traveling options of ``evalsweep run``, read
    from the words alone (this machine's EVALSWEEP_DATA_DIR is not the other machine's)."""


# -- spec -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunArguments:
    """A sweep as read from a command line: the spec and the checkpoint to compare with."""

    spec: SweepSpec
    baseline: str | None = None


def _code_task(name: str, code: Mapping[str, Any]) -> Any:
    """Code tasks (:func:`evalsweep.tasks.code_task_class`) take their sampling options;
    every other task is named as given."""
    from evalsweep.tasks import code_task_class

    task_class = code_task_class(name)
    return name if task_class is None else task_class(**code)


def build_spec(checkpoints: Sequence[str], values: Mapping[str, Any]) -> SweepSpec:
    """The spec of parsed ``values`` (names of :data:`OPTIONS`; absent ones take their default).

    Raises:
        ConfigError: a number outside its option's bounds, or not finite.
        TaskError: chat-template options that contradict each other, or code-task
            sampling no task accepts.
    """
    from evalsweep.engine import ChatOptions, SweepSpec
    from evalsweep.models import BackendOptions

    parts: dict[str, dict[str, Any]] = {"spec": {}, "backend": {}, "chat": {}, "code": {}}
    for each in OPTIONS:
        value = values.get(each.name, each.default)
        problem = value_problem(each, value)
        if problem:  # every value given, also of the options that do not fill the spec
            raise ConfigError(f"{each.flag} {problem}")
        if each.lands in parts:
            if each.kind in ("folder", "file") and value is not None:
                value = str(value)
            parts[each.lands][each.attribute] = value
    spec = parts["spec"]
    chat = parts["chat"]
    tasks = spec.pop("tasks")
    return SweepSpec(
        checkpoints=list(checkpoints),
        tasks=[_code_task(name, parts["code"]) for name in task_list(tasks or "")],
        options=BackendOptions(**parts["backend"]),
        chat=ChatOptions.from_flags(
            chat["apply_chat_template"], chat["fewshot_as_multiturn"], chat["system_instruction"]
        ),
        **spec,
    )


def _task_name(task: Any) -> str:
    return task if isinstance(task, str) else str(task.name)


def spec_values(spec: SweepSpec) -> dict[str, Any]:
    """The traveling options' values that give ``spec`` again (the inverse of :func:`build_spec`).

    Raises:
        ConfigError: the spec cannot be said on a command line: a task given as an
            object other than a code task, or code tasks with different sampling.
    """
    from evalsweep.tasks import code_task_class
    from evalsweep.tasks._code import CodeTask

    values: dict[str, Any] = {}
    code: dict[str, Any] | None = None
    for task in spec.tasks:
        if isinstance(task, str):
            if code_task_class(task) is None:
                continue
            task = _code_task(task, {})  # a code task named: its own default sampling
        if not isinstance(task, CodeTask) or code_task_class(task.name) is None:
            raise ConfigError(
                f"task {task.name!r} is a Python object: name it (or its task file) to run it "
                "elsewhere"
            )
        sampling = {o.attribute: getattr(task, o.attribute) for o in OPTIONS if o.lands == "code"}
        if code is not None and sampling != code:
            raise ConfigError("code tasks with different sampling cannot run as one command")
        code = sampling
    for each in OPTIONS:
        if each.lands == "spec":
            value = getattr(spec, each.attribute)
            if each.name == "tasks":
                value = tuple(_task_name(t) for t in spec.tasks)
        elif each.lands == "backend":
            value = getattr(spec.options, each.attribute)
        elif each.lands == "chat":
            value = getattr(spec.chat, each.attribute)
            if each.name == "fewshot_as_multiturn" and value == spec.chat.apply_chat_template:
                value = None  # what ChatOptions.from_flags gives when neither flag is passed
        elif each.lands == "code":
            value = code[each.attribute] if code is not None else each.default
        else:
            continue
        values[each.name] = value
    return values


def to_argv(spec: SweepSpec, *, baseline: str | None = None) -> list[str]:
    """``evalsweep run`` arguments that make ``spec`` again: every traveling option that is
    not at its default, then ``--`` and the checkpoint references (so none reads as an option).

    Where results go and how they are shown (``--store``, ``--out``, ``--json``...) are
    the caller's to add, before these.
    """
    values = spec_values(spec)
    values["baseline"] = baseline
    argv: list[str] = []
    for each in OPTIONS:
        if not each.travels:
            continue
        if each.name == "tasks":
            argv += [each.flag, tasks_value(values["tasks"])]
            continue
        problem = value_problem(each, values[each.name])
        words = _written(each, values[each.name])
        if problem is None and any("\x00" in word for word in words):
            problem = "holds a NUL, which no command line can carry"
        if problem:
            raise ConfigError(f"{each.flag} {problem}: this sweep cannot run as a command")
        argv += words
    for index, reference in enumerate(spec.checkpoints):
        if not reference or "\x00" in reference:
            raise ConfigError(f"checkpoints[{index}] is empty or holds a NUL")
    argv += ["--", *spec.checkpoints]
    # Exact or not used: the words must read back as this sweep, or no command runs
    # elsewhere; the error names what would change.
    read = from_argv(argv)
    again = spec_values(read.spec)
    again["baseline"] = read.baseline
    changed = [name for name, value in values.items() if not _same(again.get(name), value)]
    if changed or list(read.spec.checkpoints) != list(spec.checkpoints):
        named = ", ".join(BY_NAME[name].flag for name in changed) or "the checkpoints"
        raise ConfigError(f"{named}: written as evalsweep run arguments, reads back otherwise")
    return argv


def _same(a: Any, b: Any) -> bool:
    """Equal, and for floats the same float (``-0.0`` is not ``0.0`` in a sampler's key)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def from_argv(argv: Sequence[str]) -> RunArguments:
    """Read ``evalsweep run`` arguments (as :func:`to_argv` writes them) with click's parser.

    Raises:
        ConfigError: arguments ``evalsweep run`` would refuse (named by click).
    """
    try:
        context = _reader.make_context("run", list(argv))
    except click.ClickException as exc:
        raise ConfigError(f"evalsweep run arguments: {exc.format_message()}") from None
    values = dict(context.params)
    spec = build_spec(values.pop("checkpoints"), values)
    return RunArguments(spec, values.get("baseline"))


def environment_names() -> tuple[str, ...]:
    """The environment variables that set an option of ``evalsweep run``. A command that
    runs a written sweep (a job, a remote run) runs without them, so what runs is what
    its words say, not what the machine it runs on happens to have set."""
    return tuple(each.envvar for each in OPTIONS if each.envvar)


def words_only_environment(
    environment: Mapping[str, str], added: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environment`` (and ``added`` over it: secrets for a job) without the variables of
    :func:`environment_names` and without any ``added`` name of evalsweep's own
    (``EVALSWEEP_*``, :func:`evalsweep.secrets.is_setting_name`), which would change what
    runs (task folders, data) behind the words."""
    result = dict(environment)
    for name, value in (added or {}).items():
        if not is_setting_name(name):
            result[name] = value
    for name in environment_names():
        result.pop(name, None)
    return result


# -- agents -----------------------------------------------------------------------------


def agent_options() -> tuple[Option, ...]:
    """The options an agent may set in ``quote_sweep``, in table order."""
    return tuple(each for each in OPTIONS if each.agent)

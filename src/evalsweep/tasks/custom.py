"""A person's own benchmark: a JSON Lines file plus a short YAML or TOML task file.

The task file uses lm-eval's field names, so an in-house task reads like an
lm-eval task and behaves like one (prompt assembly, few-shot draws, scoring)::

    task: capitals                     # default: the file's name
    data: capitals.jsonl               # relative to the task file
    fewshot_data: capitals_train.jsonl # optional; default: the data file, minus the question
    output_type: multiple_choice       # or generate_until
    doc_to_text: "Q: What is the capital of {{country}}?\\nA:"
    doc_to_choice: choices             # a field, a YAML list, or a template giving a list
    doc_to_target: answer              # a field or template: an index or the choice's text
    num_fewshot: 0
    metric_list: [acc, acc_norm]       # generate_until: [exact_match]
    generation_kwargs: {until: ["\\n"], max_gen_toks: 32}   # generate_until only

Templates are Jinja2 over the row's fields, as in lm-eval, rendered in a sandbox
(:mod:`evalsweep.tasks._templates`): a template sees the row's fields and Jinja's
filters, never Python objects, so no code runs from a task file. A malformed file,
or a template that reaches for more, fails with one line naming the file and the key.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import string
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsweep.errors import TaskError
from evalsweep.requests import GenerationRequest, LoglikelihoodResult
from evalsweep.tasks._aggregate import mean_per_metric
from evalsweep.tasks._base import (
    AggregateScore,
    ChatPrompt,
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    TaskData,
    TaskDefaults,
)
from evalsweep.tasks._choice import MultipleChoiceTask, prompt_turns
from evalsweep.tasks._data import read_jsonl
from evalsweep.tasks._fewshot import FewshotSampler
from evalsweep.tasks._templates import TaskTemplates, render

TASK_FILE_SUFFIXES = (".yaml", ".yml", ".toml")
#: Directories (separated by os.pathsep) whose task files can be named by their task name.
TASK_DIRS_ENV = "EVALSWEEP_TASK_DIRS"
KNOWN_KEYS = {
    "task", "data", "fewshot_data", "output_type", "doc_to_text", "doc_to_choice",
    "doc_to_target", "num_fewshot", "fewshot_sampler", "description", "target_delimiter",
    "fewshot_delimiter", "metric_list", "generation_kwargs", "ignore_case",
    "ignore_punctuation", "regexes_to_ignore", "version", "doc_to_question",
}  # fmt: skip
CHOICE_METRICS = ("acc", "acc_norm")
GENERATION_METRICS = ("exact_match",)
Row = Mapping[str, Any]


def is_task_file(name: str) -> bool:
    return name.endswith(TASK_FILE_SUFFIXES)


def find_task_file(name: str) -> Path | None:
    """A task file named ``<name>.yaml|yml|toml`` in ``$EVALSWEEP_TASK_DIRS``, if any."""
    for folder in filter(None, os.environ.get(TASK_DIRS_ENV, "").split(os.pathsep)):
        for suffix in TASK_FILE_SUFFIXES:
            path = Path(folder).expanduser() / f"{name}{suffix}"
            if path.is_file():
                return path
    return None


def load_task_file(path: Path | str) -> CustomChoiceTask | CustomGenerationTask:
    """Parse and check a task file; every problem is a :class:`TaskError` naming file and key."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise TaskError(f"task file not found: {path}")
    config = _parse(path)
    unknown = sorted(set(config) - KNOWN_KEYS)
    if unknown:
        raise TaskError(
            f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    spec = _Spec(path, config)
    output_type = spec.text("output_type", "multiple_choice")
    if output_type == "multiple_choice":
        return CustomChoiceTask(spec)
    if output_type == "generate_until":
        return CustomGenerationTask(spec)
    raise TaskError(
        f"{path}: output_type: must be multiple_choice or generate_until, got {output_type!r}"
    )


def _parse(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    try:
        if path.suffix == ".toml":
            config = tomllib.loads(raw.decode("utf-8"))
        else:
            import yaml

            config = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: not valid TOML ({exc})") from exc
    except Exception as exc:  # yaml.YAMLError and its marked subclasses
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).split("\n")[0].strip()
        raise TaskError(f"{where}: not valid YAML ({problem})") from exc
    if not isinstance(config, dict):
        raise TaskError(f"{path}: expected a mapping of keys (task, data, doc_to_text...)")
    return config


class _Spec:
    """Typed access to a task file's keys, with errors naming file and key."""

    def __init__(self, path: Path, config: Mapping[str, Any]) -> None:
        self.path = path
        self.config = config
        self.digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]

    def fail(self, key: str, message: str) -> TaskError:
        return TaskError(f"{self.path}: {key}: {message}")

    def text(self, key: str, default: str | None = None) -> str:
        value = self.config.get(key, default)
        if value is None:
            raise self.fail(key, "required")
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {type(value).__name__}")
        return value

    def integer(self, key: str, default: int) -> int:
        value = self.config.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.fail(key, f"must be a whole number 0 or more, got {value!r}")
        return value

    def flag(self, key: str) -> bool:
        value = self.config.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def strings(self, key: str, default: Sequence[str]) -> list[str]:
        value = self.config.get(key, list(default))
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"must be a list of strings, got {value!r}")
        return value

    def metrics(self, allowed: Sequence[str]) -> tuple[MetricSpec, ...]:
        names = []
        for item in self.config.get("metric_list", list(allowed)) or []:
            name = item.get("metric") if isinstance(item, dict) else item
            if name not in allowed:
                raise self.fail("metric_list", f"{name!r} is not one of {', '.join(allowed)}")
            names.append(str(name))
        if not names:
            raise self.fail("metric_list", "needs at least one metric")
        return tuple(MetricSpec(name) for name in names)

    def data_file(self, key: str) -> Path | None:
        if key not in self.config and key == "fewshot_data":
            return None
        path = Path(self.text(key)).expanduser()
        return path if path.is_absolute() else self.path.parent / path

    def template(self, key: str, default: str | None = None) -> _Template:
        value = self.config.get(key, default)
        if isinstance(value, list):
            return _Template(self, key, value)
        return _Template(self, key, self.text(key, default))


class _Template:
    """A Jinja2 template, a bare field name, or (for choices) a list, rendered per row."""

    def __init__(self, spec: _Spec, key: str, source: str | list[Any]) -> None:
        import jinja2

        self.spec, self.key, self.source = spec, key, source
        environment = TaskTemplates()  # data, never code: see tasks/_templates.py
        try:
            if isinstance(source, list):
                self.compiled = [environment.from_string(str(s)) for s in source]
            else:
                self.compiled = [environment.from_string(source)]
        except jinja2.TemplateSyntaxError as exc:
            raise spec.fail(
                key, f"template error on its line {exc.lineno} ({exc.message})"
            ) from exc

    def value(self, row: Row, where: str) -> Any:
        import jinja2
        from jinja2.sandbox import SecurityError

        if isinstance(self.source, str) and self.source in row:
            return row[self.source]
        try:
            rendered = [render(template, row) for template in self.compiled]
        except jinja2.UndefinedError as exc:
            raise self.spec.fail(self.key, f"{exc.message} in {where}") from exc
        except SecurityError as exc:
            raise self.spec.fail(
                self.key, f"template refused for {where}: {exc} (no code runs from task files)"
            ) from None
        except RecursionError:
            raise self.spec.fail(self.key, f"template nests too deeply for {where}") from None
        except Exception as exc:
            raise self.spec.fail(self.key, f"cannot render for {where} ({exc})") from exc
        return rendered if isinstance(self.source, list) else rendered[0]


class _CustomBase(TaskDefaults):
    """Loading and identity shared by both kinds of custom task."""

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec
        self.name = spec.text("task", spec.path.stem)
        if not re.fullmatch(r"[\w.\-]+", self.name):
            raise spec.fail("task", f"{self.name!r}: use letters, digits, '_', '-' or '.'")
        self.version = f"custom {spec.text('version', '1')} ({spec.path.name} {spec.digest})"
        self.default_num_fewshot = spec.integer("num_fewshot", 0)
        self.description = spec.text("description", "")
        self.target_delimiter = spec.text("target_delimiter", " ")
        self.fewshot_delimiter = spec.text("fewshot_delimiter", "\n\n")
        self.fewshot_method = spec.text("fewshot_sampler", "default")
        if self.fewshot_method not in ("default", "first_n"):
            raise spec.fail(
                "fewshot_sampler", f"must be default or first_n, got {self.fewshot_method!r}"
            )
        self.text_template = spec.template("doc_to_text")
        self.question_template = (
            spec.template("doc_to_question") if "doc_to_question" in spec.config else None
        )
        self.target_template = spec.template("doc_to_target")
        self.data_path = spec.data_file("data")
        self.fewshot_path = spec.data_file("fewshot_data")

    def extra_settings(self) -> dict[str, Any]:
        return {"task_file": str(self.spec.path.resolve()), "task_file_sha": self.spec.digest}

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        assert self.data_path is not None
        rows = read_jsonl(self.data_path, (), None)
        if not rows:
            raise TaskError(f"{self.data_path}: no rows")
        test = rows[:limit]
        documents = [Document(str(i), i, row) for i, row in enumerate(test)]
        for doc in documents:  # every problem in the data shows before any compute
            self.check(doc.fields, f"{self.data_path}:{doc.doc_id + 1}")
        if self.fewshot_path is None:
            pool: dict[str, list[Row]] = {"eval": list(rows)}
        else:
            pool = {"fewshot": list(read_jsonl(self.fewshot_path, (), None))}
            for number, row in enumerate(pool["fewshot"], start=1):
                self.check(row, f"{self.fewshot_path}:{number}")
        return TaskData(documents, pool, f"file:{self.data_path}")

    def check(self, row: Row, where: str) -> None:
        self.text_template.value(row, where)
        if self.question_template is not None:
            self.question_template.value(row, where)

    def question(self, row: Row) -> str:
        return str(self.text_template.value(row, "a row"))

    def shown_question(self, row: Row) -> str:
        """The question reports show for a row: ``doc_to_question``, else the rendered prompt."""
        if self.question_template is not None:
            return str(self.question_template.value(row, "a row"))
        return self.question(row)


class CustomChoiceTask(_CustomBase, MultipleChoiceTask):
    """``output_type: multiple_choice``: one log-likelihood request per choice."""

    def __init__(self, spec: _Spec) -> None:
        super().__init__(spec)
        self.choice_template = spec.template("doc_to_choice")
        self.metrics = spec.metrics(CHOICE_METRICS)

    def check(self, row: Row, where: str) -> None:
        super().check(row, where)
        choices = self._choices(row, where)
        self._gold(row, choices, where)

    def _choices(self, row: Row, where: str) -> list[str]:
        value = self.choice_template.value(row, where)
        if isinstance(value, str):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise self.spec.fail("doc_to_choice", f"{where}: not a list: {value!r}") from None
        if not isinstance(value, list) or len(value) < 2:
            raise self.spec.fail("doc_to_choice", f"{where}: needs a list of 2 or more choices")
        return [str(choice) for choice in value]

    def _gold(self, row: Row, choices: list[str], where: str) -> int:
        value = self.target_template.value(row, where)
        if isinstance(value, str) and value.strip().isdigit() and value not in choices:
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(choices):
                raise self.spec.fail("doc_to_target", f"{where}: index {value} out of range")
            return value
        if str(value) in choices:
            return choices.index(str(value))
        raise self.spec.fail("doc_to_target", f"{where}: {value!r} is not one of the choices")

    def choices(self, row: Row) -> list[str]:
        return self._choices(row, "a row")

    def gold(self, row: Row) -> int:
        return self._gold(row, self._choices(row, "a row"), "a row")


class CustomGenerationTask(_CustomBase):
    """``output_type: generate_until``: greedy generation, scored by exact match."""

    def __init__(self, spec: _Spec) -> None:
        super().__init__(spec)
        self.metrics = spec.metrics(GENERATION_METRICS)
        kwargs = spec.config.get("generation_kwargs", {}) or {}
        if not isinstance(kwargs, dict):
            raise spec.fail("generation_kwargs", "must be a mapping (until, max_gen_toks)")
        unknown = sorted(set(kwargs) - {"until", "max_gen_toks", "do_sample", "temperature"})
        if unknown:
            raise spec.fail("generation_kwargs", f"unknown key {unknown[0]!r}")
        until = kwargs.get("until", [self.fewshot_delimiter])
        if isinstance(until, str):
            until = [until]
        if not isinstance(until, list) or not all(isinstance(u, str) for u in until):
            raise spec.fail("generation_kwargs", f"until must be a list of strings, got {until!r}")
        max_gen_toks = kwargs.get("max_gen_toks", 256)
        if not isinstance(max_gen_toks, int) or max_gen_toks < 1:
            raise spec.fail(
                "generation_kwargs", f"max_gen_toks must be 1 or more, got {max_gen_toks!r}"
            )
        self.until = tuple(until)
        self.max_gen_toks = max_gen_toks
        self.ignore_case = spec.flag("ignore_case")
        self.ignore_punctuation = spec.flag("ignore_punctuation")
        self.regexes_to_ignore = spec.strings("regexes_to_ignore", ())
        for pattern in self.regexes_to_ignore:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise spec.fail("regexes_to_ignore", f"{pattern!r}: {exc}") from exc

    def check(self, row: Row, where: str) -> None:
        super().check(row, where)
        self.target_template.value(row, where)

    def target(self, row: Row) -> str:
        value = self.target_template.value(row, "a row")
        return str(value[0] if isinstance(value, list) else value)

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        from_eval = "eval" in data.fewshot_pool
        sampler = FewshotSampler(
            self.name,
            data.fewshot_pool["eval" if from_eval else "fewshot"],
            self.fewshot_method,
            exclude_self=from_eval,
        )
        prepared = []
        for doc in data.documents:
            shots = [
                (self.question(s), self.target(s)) for s in sampler.draw(num_fewshot, doc.fields)
            ]
            turns = prompt_turns(
                self.description, shots, self.question(doc.fields),
                self.target_delimiter, self.fewshot_delimiter,
            )  # fmt: skip
            chat = ChatPrompt(turns)
            request = GenerationRequest(chat.plain_text(), self.until, self.max_gen_toks)
            prepared.append(PreparedDocument(doc, (request,), chat))
        return prepared

    def normalise(self, text: str) -> str:
        """lm-eval's ``exact_match`` preparation: ignored regexes, case, punctuation."""
        for pattern in self.regexes_to_ignore:
            text = re.sub(pattern, "", text)
        if self.ignore_case:
            text = text.lower()
        if self.ignore_punctuation:
            text = text.translate(str.maketrans("", "", string.punctuation))
        return text

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        response = str(responses[0])
        target = self.target(document.fields)
        correct = self.normalise(response.strip()) == self.normalise(target.strip())
        return ScoredDocument(
            target=target,
            prediction=response.strip(),
            metrics={"exact_match": float(correct)},
            correct=correct,
            response=response,
        )

    def aggregate(
        self, documents: Sequence[Document], scored: Sequence[ScoredDocument]
    ) -> list[AggregateScore]:
        return mean_per_metric(["exact_match"], scored)

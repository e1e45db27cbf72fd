"""lm-evaluation-harness ``--log_samples`` output (``results_*.json``, ``samples_*.jsonl``).

lm-eval writes, per run, one ``results_<date>.json`` (model and its
arguments, per-task versions, few-shot counts, metric directions) and one
``samples_<task>_<date>.jsonl`` per task, with a line per (document, filter):
the document, the requests' arguments, the raw and filtered responses and
each per-sample metric. Every document becomes one stored row; a metric is
named as lm-eval names it (``acc``, ``exact_match,strict-match``; the
``none`` filter left out, as evalsweep's own tasks name theirs).

The model becomes a checkpoint: a local folder resolves to the same identity
an evalsweep run of it has; a Hub id with lm-eval's recorded commit to
``hub:<repo>@<sha>``; anything else is kept under the reference lm-eval
recorded (kind ``imported``). Nothing is fetched from the Hub.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsweep.checkpoints import ResolvedCheckpoint, resolve_checkpoint
from evalsweep.datafiles import display_path, read_json_object, read_records
from evalsweep.errors import CheckpointError, DataError
from evalsweep.store import SampleRecord, Store, settings_key
from evalsweep.tasks import SUBJECTS

Row = Mapping[str, Any]


@dataclass
class ImportedRun:
    """What one ``results_*.json`` brought in."""

    results_file: str
    checkpoint: dict[str, Any]
    tasks: dict[str, int] = field(default_factory=dict)  # task -> documents stored
    skipped: list[str] = field(default_factory=list)  # tasks or groups without samples


def import_lm_eval(folder: Path, store: Store) -> list[ImportedRun]:
    """Store every run found under ``folder``; raise :class:`DataError` if there is none."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DataError(f"not a folder: {folder}")
    results_files = sorted(folder.rglob("results_*.json"))
    if not results_files:
        raise DataError(
            f"{folder}: no lm-eval results_*.json (run lm_eval with --output_path DIR "
            "--log_samples)"
        )
    runs = [_import_run(path, store) for path in results_files]
    if not any(run.tasks for run in runs):
        raise DataError(
            f"{folder}: no samples_<task>_*.jsonl beside the results; lm-eval must run with "
            "--log_samples"
        )
    store.audit_event(
        "import",
        f"import-lm-eval {folder}",
        detail={"runs": [run.results_file for run in runs]},
    )
    return runs


def _import_run(results_path: Path, store: Store) -> ImportedRun:
    results = _read_json(results_path)
    config = results.get("config") or {}
    model_args = _model_args(config.get("model_args"), results_path)
    checkpoint = _checkpoint(results, config, model_args)
    backend = {
        "backend": f"lm-eval {config.get('model', 'unknown')}",
        "dtype": str(model_args.get("dtype", "auto")),
        "device_type": str(config.get("device") or "unknown").split(":")[0],
        "source": "lm-eval",
    }
    backend_key = settings_key("backend", backend)
    store.remember_key(backend_key, "backend", backend)
    store.remember_reference(checkpoint.reference, checkpoint.to_dict())
    run = ImportedRun(str(results_path), checkpoint.to_dict())
    stamp = results_path.stem.removeprefix("results_")
    for task in sorted(results.get("results", {})):
        samples = _samples_file(results_path.parent, task, stamp)
        if samples is None:
            run.skipped.append(task)
            continue
        lines = _read_jsonl(samples)
        records, metrics = _records(lines, samples, task)
        if not records:
            run.skipped.append(task)
            continue
        settings = {
            "task": task,
            "version": f"lm-eval {task} v{results.get('versions', {}).get(task, '?')}",
            "num_fewshot": int(results.get("n-shot", {}).get(task, 0) or 0),
            "source": "lm-eval",
            "metrics": metrics,
            "higher_is_better": results.get("higher_is_better", {}).get(task, {}),
            "apply_chat_template": bool(results.get("chat_template")),
            "fewshot_as_multiturn": bool(results.get("fewshot_as_multiturn")),
            "system_instruction": results.get("system_instruction"),
        }
        task_key = settings_key("task", settings)
        store.remember_key(task_key, "task", settings)
        store.write(
            SampleRecord(
                checkpoint=checkpoint.identity,
                backend=backend_key,
                task=task,
                settings=task_key,
                **record,
            )  # fmt: skip
            for record in records
        )
        run.tasks[task] = len(records)
    return run


def _model_args(value: Any, where: Path) -> dict[str, Any]:
    """lm-eval records model_args as a dict or as its ``key=value,key=value`` string."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        pairs = [part.split("=", 1) for part in value.split(",") if "=" in part]
        return {key.strip(): val.strip() for key, val in pairs}
    if value is None:
        return {}
    raise DataError(f"{where}: config.model_args has an unexpected form")


def _checkpoint(results: Row, config: Row, model_args: Row) -> ResolvedCheckpoint:
    """The model as a checkpoint identity, without contacting the Hub."""
    location = str(model_args.get("pretrained") or results.get("model_name") or "unknown")
    revision = model_args.get("revision") or config.get("model_revision")
    revision = None if revision in (None, "", "main") else str(revision)
    reference = f"{location}@{revision}" if revision else location
    if Path(location).expanduser().is_dir():
        try:
            return resolve_checkpoint(location)
        except CheckpointError:
            pass  # the folder changed since: keep lm-eval's word for it
    sha = str(config.get("model_sha") or "")
    if sha and len(sha) == 40:
        return ResolvedCheckpoint(
            reference, "hub", location, revision, f"hub:{location}@{sha}", sha
        )
    return ResolvedCheckpoint(reference, "imported", location, revision, f"lm-eval:{reference}")


def _samples_file(folder: Path, task: str, stamp: str) -> Path | None:
    exact = folder / f"samples_{task}_{stamp}.jsonl"
    if exact.is_file():
        return exact
    found = sorted(folder.glob(f"samples_{task}_*.jsonl"))
    return found[-1] if found else None


def _records(
    lines: Sequence[tuple[int, Row]], path: Path, task: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per document (lines of several filters merged) and the metric names."""
    by_doc: dict[int, list[tuple[int, Row]]] = {}
    for number, line in lines:
        if "doc_id" not in line or "metrics" not in line:
            raise DataError(f"{path}:{number}: not an lm-eval sample (no doc_id or metrics)")
        by_doc.setdefault(int(line["doc_id"]), []).append((number, line))
    metric_names: list[str] = []
    records = []
    subject = task[5:] if task.startswith("mmlu_") and task[5:] in SUBJECTS else None
    for doc_id in sorted(by_doc):
        entries = by_doc[doc_id]
        first = entries[0][1]
        metrics: dict[str, float] = {}
        for _, line in entries:
            for name in line["metrics"]:
                value = line.get(name)
                key = name if line.get("filter", "none") == "none" else f"{name},{line['filter']}"
                # per-sample values that are not numbers (f1's pairs, bleu's strings) cannot pair
                if isinstance(value, int | float) and not math.isnan(float(value)):
                    metrics[key] = float(value)
                    if key not in metric_names:
                        metric_names.append(key)
        arguments = _arguments(first)
        target, prediction, response = _answer(first, arguments)
        headline = next((metrics[m] for m in metric_names if m in metrics), 0.0)
        document = dict(first.get("doc") or {})
        document.setdefault("question", arguments[0]["context"] if arguments else "")
        records.append(
            {
                "doc_key": str(doc_id),
                "doc_id": doc_id,
                "subject": subject,
                "request_hash": hashlib.sha256(
                    json.dumps(arguments, sort_keys=True, default=str).encode()
                ).hexdigest(),
                "requests": arguments,
                "responses": first.get("resps", []),
                "target": target,
                "prediction": prediction,
                "correct": headline >= 1.0,
                "response": response,
                "metrics": metrics,
                "details": {
                    "filtered_resps": {
                        e[1].get("filter", "none"): e[1].get("filtered_resps") for e in entries
                    }
                },
                "document": document,
            }
        )
    return records, metric_names


def _arguments(line: Row) -> list[dict[str, Any]]:
    """The requests as evalsweep stores them: context and continuation, or context and stops."""
    requests = []
    arguments = line.get("arguments") or {}
    for key in sorted(arguments, key=lambda k: int(str(k).rsplit("_", 1)[-1])):
        args = arguments[key]
        context, second = args.get("arg_0", ""), args.get("arg_1")
        if isinstance(second, dict):
            requests.append(
                {"kind": "generate_until", "context": context, "until": second.get("until", [])}
            )
        else:
            requests.append({"kind": "loglikelihood", "context": context, "continuation": second})
    return requests


def _answer(line: Row, arguments: list[dict[str, Any]]) -> tuple[str, str, str | None]:
    """(target, prediction, raw response) in words a person can read in ``flips``."""
    target = line.get("target")
    if arguments and all(a["kind"] == "loglikelihood" for a in arguments):
        choices = [str(a["continuation"]).strip() for a in arguments]
        lls = [_float(resp[0][0]) if resp else -math.inf for resp in line.get("resps", [])]
        best = max(range(len(lls)), key=lambda i: (lls[i], -i)) if lls else 0
        if isinstance(target, int) or (isinstance(target, str) and target.strip().isdigit()):
            index = int(target)
            target = choices[index] if 0 <= index < len(choices) else str(target)
        return str(target), choices[best] if choices else "", None
    filtered = line.get("filtered_resps") or [""]
    raw = line.get("resps") or [[""]]
    response = (
        raw[0][0] if raw and isinstance(raw[0], list) and raw[0] else str(raw[0] if raw else "")
    )
    prediction = filtered[0] if isinstance(filtered, list) and filtered else str(filtered)
    if isinstance(prediction, list):
        prediction = prediction[0] if prediction else ""
    return str(target), str(prediction), str(response)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return -math.inf


def _read_json(path: Path) -> dict[str, Any]:
    data, _ = read_json_object(path, nonfinite=True)
    if "results" not in data:
        raise DataError(f"{display_path(path)}: not an lm-eval results file (no 'results')")
    return data


def _read_jsonl(path: Path) -> list[tuple[int, Row]]:
    records = read_records(path, lines=True, empty_ok=True, nonfinite=True).records
    return [(record.line, record.value) for record in records]

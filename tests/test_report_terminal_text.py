"""Terminal output shows data as written: names, questions and answers are never rich markup.

A checkpoint folder called ``run[b]``, a question about ``f[x]`` or a model that
writes ``[/dim]`` once lost text or crashed the command (rich's MarkupError).
The renderers are fed the same real sweep the HTML tests build, with brackets
put into its names and texts.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalsweep.report import RichProgress, document_json, parse_document
from evalsweep.report._audit import render_audit
from evalsweep.report._flips import render_flips
from evalsweep.report._table import render_subject_table, render_table
from test_report_html import ReportInputs, build_report_inputs

# Each would be read as a style or a closing tag if it were markup.
ODD = "[b]x[/b] [/dim] [red]"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer, data_dir, gpt2_a) -> ReportInputs:  # type: ignore[no-untyped-def]
    return build_report_inputs(tmp_path_factory, tokenizer, data_dir, gpt2_a)


def shown(renderable: Any) -> str:
    console = Console(file=io.StringIO(), width=400, force_terminal=True, record=True)
    console.print(renderable)
    return console.export_text()


def test_checkpoint_and_task_names_show_as_written(inputs: ReportInputs) -> None:
    candidate = inputs.candidates[0]
    odd_name = candidate + ODD
    text = document_json(inputs.document)
    text = text.replace(json.dumps(candidate)[1:-1], json.dumps(odd_name)[1:-1])
    task = next(r.task for r in inputs.document.results if r.level == "task")
    document = parse_document(text.replace(f'"{task}"', json.dumps(task + "[i]")), "renamed")
    table = shown(render_table(document.results, document.comparisons))
    assert ODD in table and task + "[i]" in table
    per_subject = shown(render_subject_table(document.results, document.comparisons))
    assert Path(odd_name).name in per_subject


def test_flips_show_questions_and_answers_as_written(inputs: ReportInputs) -> None:
    candidate = inputs.candidates[0]
    flips = [dict(flip) for flip in inputs.flips[candidate][:3]]
    assert flips, "the sweep has flips to show"
    for flip in flips:
        flip["question"] = f"f{ODD} {flip['question']}"
        flip["target"] = ODD
        flip["candidate_response"] = f"because {ODD}"
    text = shown(render_flips(flips, inputs.baseline + "[u]", candidate + ODD))
    assert text.count(f"f{ODD}") == len(flips)
    assert f"because {ODD}" in text and inputs.baseline + "[u]" in text and candidate + ODD in text


def test_audit_rows_show_commands_as_written() -> None:
    entry = {
        "id": 7, "kind": "command", "target": "gpu[a100]", "started": 0.0, "ended": None,
        "exit_code": 0, "output_bytes": 12, "text": f"evalsweep run --tasks {ODD}",
    }  # fmt: skip
    text = shown(render_audit([entry]))
    assert "gpu[a100]" in text and f"--tasks {ODD}" in text


def test_progress_labels_and_notes_show_as_written() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=True, color_system=None)
    with RichProgress(console) as bars:
        bars.start(f"run{ODD} · mmlu", total=2)
        bars.advance(2)
        bars.note(f"remote: {ODD}")
        bars.finish()
    out = buffer.getvalue()
    assert f"run{ODD} · mmlu" in out and f"remote: {ODD}" in out


def test_error_lines_name_odd_paths_as_written(tmp_path: Path, data_dir: Path) -> None:
    folder = tmp_path / "run[b]"
    folder.mkdir()
    samples = folder / "samples[i].jsonl"
    samples.write_text("{not json\n")
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--samples", str(samples),
         "--problems", str(data_dir / "humaneval" / "HumanEval.jsonl.gz")],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    assert ran.returncode != 0 and "Traceback" not in ran.stderr
    assert ran.stderr.startswith(f"evalsweep: error: {samples}:1: not valid JSON"), ran.stderr

"""What ``evalsweep run`` and ``compare`` write when nobody is watching a terminal.

A CI log or an agent's background job captures stdout and stderr into files:
there the table must keep every name whole (no 80-column squeeze), the verdict
must be said in words under it, progress must be plain lines (task, checkpoint,
done/total, rate, ETA) rather than one frame of a bar, and NO_COLOR or
``--no-color`` must leave no escape code even where colour is forced.

Real subprocesses, real checkpoints (two GPT-2s built to always answer " A" or
" B", as in test_compare_cli) on real MMLU rows whose answer is A: "B" is a
certain regression, so the summary has something to say.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from conftest import EVALSWEEP_COMMAND as EVALSWEEP
from evalsweep.report import PlainProgress
from test_cli_compare import _letter_model

SUBJECT = "high_school_geography"
TASK = f"mmlu_{SUBJECT}"
LONG_A = "./checkpoint-of-a-long-running-experiment-that-always-answers-A"
LONG_B = "./checkpoint-of-a-long-running-experiment-that-always-answers-B"
ESCAPE = "\x1b["


@dataclass
class Case:
    root: Path
    store: Path
    env: dict[str, str]
    stdout: str
    stderr: str


def _run(args: list[str], case_root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Files, not pipes, as a CI runner or a background job would give.
    out, err = case_root / "stdout.txt", case_root / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        done = subprocess.run(
            [*EVALSWEEP, *args], cwd=case_root, env=env, stdout=stdout, stderr=stderr,
            text=True, timeout=600, check=False,
        )  # fmt: skip
    return subprocess.CompletedProcess(done.args, done.returncode, out.read_text(), err.read_text())


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory, tokenizer, data_dir: Path) -> Case:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("cli-output")
    models = root / "models"
    (root / LONG_A).symlink_to(_letter_model(models, tokenizer, "A"), target_is_directory=True)
    (root / LONG_B).symlink_to(_letter_model(models, tokenizer, "B"), target_is_directory=True)
    data = root / "data" / "mmlu"
    for split in ("dev", "test"):
        (data / split).mkdir(parents=True)
    source = data_dir / "mmlu"
    (data / "dev" / f"{SUBJECT}_dev.csv").write_bytes(
        (source / "dev" / f"{SUBJECT}_dev.csv").read_bytes()
    )
    with (source / "test" / f"{SUBJECT}_test.csv").open(newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.reader(handle) if row[5] == "A"][:12]
    with (data / "test" / f"{SUBJECT}_test.csv").open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    env["EVALSWEEP_PROGRESS_INTERVAL"] = "0"  # a line per step of progress, to read them all
    store = root / "results.sqlite"
    ran = _run(
        ["run", LONG_A, LONG_B, "--tasks", TASK, "--data-dir", str(root / "data")]
        + ["--num-fewshot", "0", "--device", "cpu", "--store", str(store)],
        root,
        env,
    )
    assert ran.returncode == 0, ran.stderr
    return Case(root, store, env, ran.stdout, ran.stderr)


def test_the_table_keeps_every_name_whole_when_stdout_is_a_file(case: Case) -> None:
    assert "…" not in case.stdout
    for name in (LONG_A[2:], LONG_B[2:], TASK):
        assert name in case.stdout, name
    row = next(line for line in case.stdout.splitlines() if LONG_B[2:] in line)
    assert "Δ" not in row  # the value line; its difference is on the next line
    assert len(row) > 80  # the needed width, not rich's default for a file


def test_the_summary_under_the_table_names_the_regression(case: Case) -> None:
    text = case.stdout
    table_end = text.index(LONG_B[2:])
    legend = text.index("▲ improvement, ▼ regression, = no significant change")
    regression = re.search(
        rf"▼ regression: {re.escape(LONG_B[2:])} on {TASK} \(acc\): Δ -100\.0 points "
        r"\(95% CI -?[\d.]+ to -?[\d.]+ points\), adjusted p = [\d.e-]+, n = 12",
        text,
    )
    assert regression, text
    assert table_end < legend < regression.start()


def test_progress_is_plain_lines_when_stderr_is_a_file(case: Case) -> None:
    lines = [line for line in case.stderr.splitlines() if line.strip()]
    assert not any(mark in case.stderr for mark in ("━", "…", "\r", ESCAPE))
    for reference in (LONG_A, LONG_B):
        label = f"{reference} · {TASK}"
        mine = [line for line in lines if line.startswith(label + ": ")]
        assert mine[0] == f"{label}: 0/48, starting", mine  # 12 questions x 4 letters
        for line in mine[1:-1]:
            assert re.fullmatch(
                rf"{re.escape(label)}: \d+/48 \(\d+%\), ([\d,.]+/s, eta \d+:\d\d:\d\d|rate not "
                r"known yet, eta not known yet)",
                line,
            ), line
        last = rf"{re.escape(label)}: 48/48 done in \d+:\d\d:\d\d(, [\d,.]+/s)?"
        assert re.fullmatch(last, mine[-1]), mine[-1]


def test_plain_progress_writes_at_a_steady_interval() -> None:
    now = [100.0]
    buffer = io.StringIO()
    progress = PlainProgress(Console(file=buffer, width=40), interval=10.0, clock=lambda: now[0])
    progress.start("ckpt · mmlu", 100)
    for at, count in ((101.0, 10), (105.0, 10), (111.0, 10), (115.0, 10), (122.0, 10)):
        now[0] = at
        progress.advance(count)
    now[0] = 130.0
    progress.advance(50)
    progress.finish()
    assert buffer.getvalue().splitlines() == [
        "ckpt · mmlu: 0/100, starting",
        "ckpt · mmlu: 30/100 (30%), 2.7/s, eta 0:00:26",  # 11 s in: 30 done
        "ckpt · mmlu: 50/100 (50%), 2.3/s, eta 0:00:22",  # 22 s in: 50 done
        "ckpt · mmlu: 100/100 done in 0:00:30, 3.3/s",
    ]  # every line whole, however narrow the console


def _compare(
    case: Case, extra_env: dict[str, str], before: tuple[str, ...], after: tuple[str, ...]
) -> str:
    env = {**case.env, "TERM": "xterm-256color", "FORCE_COLOR": "1", **extra_env}
    ran = _run(
        [*before, "compare", LONG_A, LONG_B, "--tasks", TASK, "--num-fewshot", "0"]
        + ["--store", str(case.store), *after],
        case.root,
        env,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_no_color_and_the_flag_leave_no_escape_codes(case: Case) -> None:
    forced = _compare(case, {}, (), ())
    assert ESCAPE in forced  # colour is forced on: the check below can fail
    for extra, before, after in (
        ({"NO_COLOR": "1"}, (), ()),
        ({}, (), ("--no-color",)),
        ({}, ("--no-color",), ()),
    ):
        plain = _compare(case, extra, before, after)
        assert ESCAPE not in plain, (extra, before, after)
        assert "▼ regression" in plain

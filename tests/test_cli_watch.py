"""``evalsweep watch`` end to end: a real process watching a real run folder.

The checkpoints are the report tests' letter models on MMLU questions whose answer
is always A: step 1000 answers A (all right), step 2000 answers B and step 3000
answers C (all wrong), so each later step is a certain regression against the
first. A checkpoint saved while the watch runs is scored and its verdict printed;
a half-written one is named and waited for; a restart computes only what the store
lacks; a regression runs the given command (as an argument list) or fails.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import EVALSWEEP_COMMAND
from test_report_html import MMLU_LIMIT, _letter_data, _letter_model

pytestmark = pytest.mark.slow


class Watching:
    """A running ``evalsweep watch`` whose output lines are collected as they come."""

    def __init__(self, args: list[Any], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [*EVALSWEEP_COMMAND, "watch", *map(str, args)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.out + self.err:
                if text in line:
                    return line
            if self.process.poll() is not None and not any(r.is_alive() for r in self.readers):
                break
            time.sleep(0.1)
        raise AssertionError(f"no line with {text!r}; stdout {self.out}, stderr {self.err}")

    def finish(self, timeout: float = 120) -> int:
        code = self.process.wait(timeout)
        for reader in self.readers:
            reader.join(10)
        return code


@pytest.fixture(scope="module")
def letters(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any, data_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("letters")
    _letter_data(root / "data", data_dir)
    for letter in "ABC":
        _letter_model(root, tokenizer, letter)
    return root


def test_watch_scores_new_checkpoints_resumes_and_acts_on_regressions(
    letters: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    run, store, marker = tmp_path / "run", tmp_path / "results.sqlite", tmp_path / "acted"
    shutil.copytree(letters / "always-A", run / "step-1000")
    common = [
        run, "--tasks", "mmlu_high_school_geography", "--data-dir", letters / "data",
        "--limit", MMLU_LIMIT, "--num-fewshot", 1, "--device", "cpu", "--dtype", "float32",
        "--store", store, "--interval", 0.2, "--settle", 0.5, "--no-color",
    ]  # fmt: skip
    record = [sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write("
              "os.environ['EVALSWEEP_STEP'] + ' ' + os.environ['EVALSWEEP_CHECKPOINT'])",
              str(marker)]  # fmt: skip
    first = Watching([*common, "--idle-exit", 6, "--on-regression", shlex.join(record)], cli_env)
    first.wait_for("step 1000: scored")
    # A save in progress is named and left alone; renamed into place, it is scored.
    shutil.copytree(letters / "always-B", run / "tmp-checkpoint-2000")
    first.wait_for("tmp-checkpoint-2000: save in progress; waiting")
    (run / "tmp-checkpoint-2000").rename(run / "checkpoint-2000")
    line = first.wait_for("step 2000: mmlu_high_school_geography (acc), n=12: 0.0000")
    assert "vs baseline ▼ -100.0 points" in line
    assert first.finish() == 0, first.err
    assert marker.read_text() == f"2000 {run}/checkpoint-2000"
    assert first.wait_for("no new checkpoint for 6 s; stopping")

    # Saved while no watch ran: a restart computes only it, and --on-regression fail stops.
    shutil.copytree(letters / "always-C", run / "step-3000")
    second = Watching([*common, "--on-regression", "fail"], cli_env)
    second.wait_for("2 checkpoint(s) already in the store: not computed again")
    line = second.wait_for("step 3000: ")
    assert "vs baseline ▼ -100.0 points" in line and "vs previous = +0.0 points" in line
    assert second.finish() == 3
    assert not any(line.startswith(("step 1000", "step 2000")) for line in second.out)
    assert second.wait_for("step-3000 regressed; stopping (--on-regression fail)")


@pytest.mark.parametrize("option", ["--interval", "--settle", "--idle-exit"])
@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1"])
def test_a_wait_that_is_not_a_finite_number_of_seconds_is_refused_in_one_line(
    tmp_path: Path, cli_env: dict[str, str], option: str, value: str
) -> None:
    from conftest import run_cli_process

    ran = run_cli_process(["watch", str(tmp_path), option, value], env=cli_env, timeout=60)
    assert ran.returncode == 2, ran
    assert "Traceback" not in ran.stderr
    assert f"Invalid value for '{option}'" in ran.stderr
    assert "must be a finite number of seconds" in ran.stderr

"""``code-eval``'s results and resume files are never written through a planted path.

Planted at ``<results>.partial``, at the temporary names, or at the results path itself: a
symlink to a file, to a directory, a dangling one, a symlink loop, a hard link, a FIFO, a
directory. The link's target is never touched; the run's verdicts are the plain run's. A
``.partial`` is reused only when its keyed MACs prove it is this run's: a forged one with the
right (computable) fingerprint, an edited line, another user's file are set aside with a
warning and their work is done again. Real sandboxed runs, real files, a real key on disk.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalsweep.cli import main
from evalsweep.codeeval import CodeEvalResult, _resultfiles, evaluate_samples_file
from evalsweep.codeeval._evaluate import _fingerprint
from evalsweep.codeproblems._problems import read_problems, read_samples
from evalsweep.errors import DataError
from evalsweep.execution import ExecutionService, Limits

PROBLEM = {
    "task_id": "T/0",
    "prompt": "def inc(x):\n",
    "entry_point": "inc",
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n",
}
SAMPLES = [
    {"task_id": "T/0", "completion": "    return x + 1\n"},
    {"task_id": "T/0", "completion": "    return x\n"},
    {"task_id": "T/0", "completion": "    return 1 + x\n"},
    {"task_id": "T/0", "completion": "    return x * 2\n"},
]
PLAIN = [True, False, True, False]  # what running each sample's test gives
VICTIM_TEXT = "the link's target: never to be written\n"


@pytest.fixture(scope="module")
def service() -> Iterator[ExecutionService]:
    with ExecutionService(workers=1, limits=Limits(timeout=5.0)) as running:
        yield running


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """evalsweep's state directory (where the resume key lives): private to each test."""
    folder = tmp_path_factory.mktemp("state") / "evalsweep"
    monkeypatch.setenv("EVALSWEEP_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    problems = work / "problems.jsonl"
    problems.write_text(json.dumps(PROBLEM) + "\n")
    samples = work / "samples.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in SAMPLES))
    return problems, samples


def _run(
    problems: Path, samples: Path, service: ExecutionService, **options: object
) -> tuple[CodeEvalResult, list[str]]:
    warned: list[str] = []
    result = evaluate_samples_file(
        problems, samples, ks=(1,), service=service, warn=warned.append, **options
    )  # type: ignore[arg-type]
    return result, warned


def _passed(result: CodeEvalResult) -> list[bool]:
    rows = [json.loads(line) for line in Path(result.results_path).read_text().splitlines()]
    assert [row["completion"] for row in rows] == [row["completion"] for row in SAMPLES]
    return [row["passed"] for row in rows]


def _interrupt_after(count: int):  # type: ignore[no-untyped-def]
    def progress(done: int, total: int) -> None:
        if done == count:
            raise KeyboardInterrupt

    return progress


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    return victim


def _plant(kind: str, at: Path, tmp_path: Path) -> Path:
    """Plant ``kind`` at ``at``; return what must stay untouched (a file or a directory)."""
    if kind == "symlink-to-file":
        victim = _victim(tmp_path)
        at.symlink_to(victim)
        return victim
    if kind == "dangling-symlink":
        victim = tmp_path / "created-through-the-link"
        at.symlink_to(victim)
        return victim
    if kind == "symlink-to-directory":
        victim = tmp_path / "victim-dir"
        victim.mkdir()
        (victim / "kept").write_text(VICTIM_TEXT)
        at.symlink_to(victim)
        return victim
    if kind == "hard-link":
        victim = _victim(tmp_path)
        os.link(victim, at)
        return victim
    if kind == "symlink-loop":
        at.symlink_to(at.name)
        return at
    if kind == "fifo":
        os.mkfifo(at)
        return at
    if kind == "directory":
        at.mkdir()
        (at / "kept").write_text(VICTIM_TEXT)
        return at
    raise AssertionError(kind)


def _untouched(victim: Path, kind: str) -> None:
    if kind == "dangling-symlink":
        assert not victim.exists() and not victim.is_symlink()
    elif kind == "symlink-to-directory":
        assert sorted(p.name for p in victim.iterdir()) == ["kept"]
        assert (victim / "kept").read_text() == VICTIM_TEXT
    elif kind == "directory":  # wherever it is now: only "kept", as it was
        assert [p.read_text() for p in victim.iterdir()] == [VICTIM_TEXT]
    elif kind in ("symlink-loop", "fifo"):
        pass  # nothing to write into; what matters is that the run neither blocked nor failed
    else:
        assert victim.read_text() == VICTIM_TEXT


KINDS = [
    "symlink-to-file",
    "dangling-symlink",
    "symlink-to-directory",
    "hard-link",
    "symlink-loop",
    "fifo",
    "directory",
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_partial_is_set_aside_never_written_through(
    tmp_path: Path, inputs: tuple[Path, Path], service: ExecutionService, kind: str
) -> None:
    problems, samples = inputs
    partial = Path(f"{samples}_results.jsonl.partial")
    victim = _plant(kind, partial, tmp_path)
    planted = os.lstat(partial)
    result, warned = _run(problems, samples, service)
    assert _passed(result) == PLAIN and result.run.samples_resumed == 0
    assert len(warned) == 1 and str(partial) in warned[0] and "set aside as" in warned[0]
    aside = [p for p in partial.parent.iterdir() if ".partial.set-aside-" in p.name]
    assert len(aside) == 1 and (os.lstat(aside[0]).st_dev, os.lstat(aside[0]).st_ino) == (
        planted.st_dev,
        planted.st_ino,
    )  # the planted thing itself, moved aside as it was
    assert not os.path.lexists(partial)
    _untouched(aside[0] if kind == "directory" else victim, kind)


@pytest.mark.parametrize("kind", ["symlink-to-file", "dangling-symlink", "symlink-to-directory"])
def test_a_link_at_the_results_path_is_refused_before_anything_runs(
    tmp_path: Path, inputs: tuple[Path, Path], kind: str
) -> None:
    problems, samples = inputs
    results = samples.parent / "results.jsonl"
    victim = _plant(kind, results, tmp_path)
    before = sorted(os.listdir(samples.parent))
    never_started = ExecutionService(workers=1)
    with pytest.raises(DataError, match="is a symbolic link") as raised:
        evaluate_samples_file(problems, samples, results_path=results, service=never_started)
    assert str(results) in str(raised.value) and "\n" not in str(raised.value)
    assert not never_started._started
    assert sorted(os.listdir(samples.parent)) == before
    _untouched(victim, kind)


@pytest.mark.parametrize(
    ("kind", "says"),
    [("directory", "is a directory"), ("fifo", "is not a regular file")],
)
def test_a_results_path_that_is_not_a_file_is_refused_before_anything_runs(
    tmp_path: Path, inputs: tuple[Path, Path], kind: str, says: str
) -> None:
    problems, samples = inputs
    results = samples.parent / "results.jsonl"
    _plant(kind, results, tmp_path)
    never_started = ExecutionService(workers=1)
    with pytest.raises(DataError, match=says):
        evaluate_samples_file(problems, samples, results_path=results, service=never_started)
    assert not never_started._started
    assert not Path(f"{results}.partial").exists()


def test_results_are_never_written_over_an_input_file(inputs: tuple[Path, Path]) -> None:
    problems, samples = inputs
    text = samples.read_text()
    for results in (samples, problems):
        with pytest.raises(DataError, match="is the input file"):
            evaluate_samples_file(problems, samples, results_path=results)
    assert samples.read_text() == text


def test_a_hard_link_at_the_results_path_is_replaced_not_written_into(
    tmp_path: Path, inputs: tuple[Path, Path], service: ExecutionService
) -> None:
    problems, samples = inputs
    results = samples.parent / "results.jsonl"
    victim = _plant("hard-link", results, tmp_path)
    result, warned = _run(problems, samples, service, results_path=results)
    assert victim.read_text() == VICTIM_TEXT and _passed(result) == PLAIN and warned == []
    assert not os.path.samefile(victim, results)


def test_a_link_planted_at_a_temporary_name_is_never_written_through(
    tmp_path: Path,
    inputs: tuple[Path, Path],
    service: ExecutionService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An attacker who guesses the next temporary names: each is skipped, never followed."""
    problems, samples = inputs
    folder, name = samples.parent, f"{samples.name}_results.jsonl"
    victim = _victim(tmp_path)
    guessed = ["0" * 16, "1" * 16]
    for token in guessed:
        for stem in (name, f"{name}.partial"):
            (folder / f".{stem}.{token}.tmp").symlink_to(victim)
    (folder / f".{name}.tmp-{os.getpid()}").symlink_to(victim)  # the old, predictable name
    draws = iter(guessed * 2)
    real = _resultfiles.secrets.token_hex
    monkeypatch.setattr(
        _resultfiles.secrets, "token_hex", lambda n=None: next(draws, None) or real(n)
    )
    result, warned = _run(problems, samples, service)
    assert victim.read_text() == VICTIM_TEXT
    assert _passed(result) == PLAIN and warned == []
    assert all((folder / f".{name}.{t}.tmp").is_symlink() for t in guessed)


def _forged_partial(problems: Path, samples: Path, header: dict[str, object]) -> str:
    lines = [json.dumps(header)]
    for index in range(len(SAMPLES)):
        row = {"index": index, "verdict": "passed", "reason": "", "detail": ""}
        lines.append(json.dumps({**row, "mac": "0" * 64}))
    return "\n".join(lines) + "\n"


def _computable_fingerprint(problems: Path, samples: Path) -> str:
    """What anyone who can read the inputs computes."""
    found, problems_digest = read_problems(problems)
    _, samples_digest = read_samples(samples, found)
    return _fingerprint(problems_digest, samples_digest, Limits().with_timeout(3.0))


@pytest.mark.parametrize(
    "header",
    [
        "v1-no-mac",
        "v2-bad-mac",
        "v2-no-mac",
        "mac-of-another-key",
        "mac-not-ascii",
        "mac-a-number",
        "mac-nested",
    ],
)
def test_a_forged_partial_with_the_right_fingerprint_is_not_reused(
    inputs: tuple[Path, Path], service: ExecutionService, header: str
) -> None:
    problems, samples = inputs
    fingerprint = _computable_fingerprint(problems, samples)
    fields: dict[str, object] = {"evalsweep_partial": 2, "fingerprint": fingerprint}
    if header == "v1-no-mac":
        fields["evalsweep_partial"] = 1
    elif header == "v2-bad-mac":
        fields["mac"] = "f" * 64
    elif header == "mac-of-another-key":
        fields["mac"] = _resultfiles._mac(b"k" * 32, "header", 2, fingerprint)
    elif header == "mac-not-ascii":
        fields["mac"] = "\u00e9" * 64
    elif header == "mac-a-number":
        fields["mac"] = 12345
    elif header == "mac-nested":
        fields["mac"] = [[{"mac": "0" * 64}]]
    partial = Path(f"{samples}_results.jsonl.partial")
    partial.write_text(_forged_partial(problems, samples, fields))
    partial.chmod(0o600)
    result, warned = _run(problems, samples, service)
    assert result.run.samples_resumed == 0 and _passed(result) == PLAIN
    assert len(warned) == 1 and "does not carry your key" in warned[0]


def test_an_interrupted_run_resumes_from_its_own_partial_even_cut_mid_line(
    inputs: tuple[Path, Path], service: ExecutionService
) -> None:
    problems, samples = inputs
    with pytest.raises(KeyboardInterrupt):
        _run(problems, samples, service, progress=_interrupt_after(3))
    partial = Path(f"{samples}_results.jsonl.partial")
    assert stat.S_IMODE(partial.stat().st_mode) == 0o600
    text = partial.read_text()
    assert len(text.splitlines()) == 4  # the header and three keyed verdicts
    partial.write_text(text[:-20])  # the last verdict cut short, as a killed run leaves it
    result, warned = _run(problems, samples, service)
    assert warned == [] and (result.run.samples_resumed, result.run.samples_run) == (2, 2)
    assert _passed(result) == PLAIN and not partial.exists()


@pytest.mark.parametrize("edit", ["flip-verdict", "move-index", "copy-line", "drop-mac"])
def test_an_edited_line_of_its_own_partial_sets_the_whole_file_aside(
    inputs: tuple[Path, Path], service: ExecutionService, edit: str
) -> None:
    problems, samples = inputs
    with pytest.raises(KeyboardInterrupt):
        _run(problems, samples, service, progress=_interrupt_after(4))
    partial = Path(f"{samples}_results.jsonl.partial")
    header, *rows = (json.loads(line) for line in partial.read_text().splitlines())
    failing = next(row for row in rows if row["verdict"] != "passed")
    passing = next(row for row in rows if row["verdict"] == "passed")
    if edit == "flip-verdict":
        failing["verdict"] = "passed"
    elif edit == "move-index":  # a passing verdict, its MAC kept, moved to a failing sample
        rows.append({**passing, "index": failing["index"]})
    elif edit == "copy-line":  # a passing line of the same run written again over a failing one
        rows.append({**failing, **{k: passing[k] for k in ("verdict", "reason", "detail")}})
    else:
        del failing["mac"]
    partial.write_text("".join(json.dumps(row) + "\n" for row in [header, *rows]))
    result, warned = _run(problems, samples, service)
    assert result.run.samples_resumed == 0 and _passed(result) == PLAIN
    assert len(warned) == 1 and "does not carry this run's key" in warned[0]


def test_its_own_partial_for_other_inputs_is_replaced_quietly(
    inputs: tuple[Path, Path], service: ExecutionService
) -> None:
    problems, samples = inputs
    with pytest.raises(KeyboardInterrupt):
        _run(problems, samples, service, progress=_interrupt_after(2))
    samples.write_text(samples.read_text() + json.dumps(SAMPLES[0]) + "\n")
    result, warned = _run(problems, samples, service)
    assert warned == [] and result.run.samples_resumed == 0 and result.n_samples == 5
    assert not [p for p in samples.parent.iterdir() if "set-aside" in p.name]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_partial_of_another_user_is_set_aside(
    inputs: tuple[Path, Path], service: ExecutionService
) -> None:
    problems, samples = inputs
    with pytest.raises(KeyboardInterrupt):
        _run(problems, samples, service, progress=_interrupt_after(2))
    partial = Path(f"{samples}_results.jsonl.partial")
    os.chown(partial, 65534, 65534)
    result, warned = _run(problems, samples, service)
    assert result.run.samples_resumed == 0 and _passed(result) == PLAIN
    assert len(warned) == 1 and "belongs to another user" in warned[0]


@pytest.mark.parametrize("bad", ["readable-by-others", "symlink", "wrong-size", "open-dir"])
def test_an_untrustworthy_key_means_no_resume_file_never_a_crash(
    tmp_path: Path,
    inputs: tuple[Path, Path],
    service: ExecutionService,
    state_dir: Path,
    bad: str,
) -> None:
    problems, samples = inputs
    state_dir.mkdir(mode=0o700, parents=True)
    key = state_dir / _resultfiles.KEY_NAME
    victim = _victim(tmp_path)
    if bad == "readable-by-others":
        key.write_bytes(b"k" * 32)
        key.chmod(0o644)
    elif bad == "symlink":
        key.symlink_to(victim)
    elif bad == "wrong-size":
        key.write_bytes(b"k" * 8)
        key.chmod(0o600)
    else:
        state_dir.chmod(0o777)
    result, warned = _run(problems, samples, service)
    assert _passed(result) == PLAIN and victim.read_text() == VICTIM_TEXT
    assert len(warned) == 1 and "this run keeps no resume file" in warned[0]
    assert not Path(f"{samples}_results.jsonl.partial").exists()


def test_a_new_key_is_private_and_kept(
    inputs: tuple[Path, Path], service: ExecutionService, state_dir: Path
) -> None:
    problems, samples = inputs
    _run(problems, samples, service)
    key = state_dir / _resultfiles.KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    first = key.read_bytes()
    _run(problems, samples, service)
    assert key.read_bytes() == first


def test_the_cli_warns_in_one_line_and_leaves_the_target_alone(
    tmp_path: Path, inputs: tuple[Path, Path]
) -> None:
    problems, samples = inputs
    partial = Path(f"{samples}_results.jsonl.partial")
    victim = _plant("symlink-to-file", partial, tmp_path)
    ran = CliRunner(mix_stderr=False).invoke(
        main,
        ["code-eval", "--problems", str(problems), "--samples", str(samples), "--workers", "1",
         "--k", "1", "--json"],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    warnings = [line for line in ran.stderr.splitlines() if line.startswith("evalsweep: warning:")]
    assert len(warnings) == 1 and "is a symbolic link: set aside as" in warnings[0]
    assert victim.read_text() == VICTIM_TEXT
    assert json.loads(ran.stdout)["counts"]["passed"] == 2


def test_a_real_code_eval_process_refuses_a_linked_results_path_in_one_line(
    tmp_path: Path, inputs: tuple[Path, Path], cli_env: dict[str, str], state_dir: Path
) -> None:
    problems, samples = inputs
    results = samples.parent / "results.jsonl"
    victim = _plant("symlink-to-file", results, tmp_path)
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(problems),
         "--samples", str(samples), "--results", str(results)],
        env={**cli_env, "EVALSWEEP_STATE_DIR": str(state_dir)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"results path {results} is a symbolic link" in lines[0]
    assert victim.read_text() == VICTIM_TEXT and not state_dir.exists()
    names = ["problems.jsonl", "results.jsonl", "samples.jsonl"]
    assert sorted(os.listdir(samples.parent)) == names

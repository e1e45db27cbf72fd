"""Shared fixtures: real benchmark data, a trained tokenizer and tiny real checkpoints.

Nothing here is a mock. The tokenizer is trained with evalsweep's own
``build_tokenizer`` on local benchmark text, and every checkpoint is a real
transformers model (random weights, safetensors on disk) built once per test
session. The Hub is never contacted: offline mode is set before anything that
could import ``huggingface_hub`` is loaded.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # The test process uses tokenizers before forking CLI subprocesses; without
    # this the child prints a fork warning on stderr.
    "TOKENIZERS_PARALLELISM": "false",
}
os.environ.update(OFFLINE_ENV)

import contextlib  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

#: A test that uses one of these fixtures talks to a real server or reference tool (sshd,
#: a Ray cluster, headless Chromium, lm-eval's own CLI): it is an integration test, outside the
#: fast lane (``scripts/test --fast``). Modules that are integration tests as a whole say so
#: with ``pytestmark = pytest.mark.integration``.
INTEGRATION_FIXTURES = frozenset({"sshd", "ray_cluster", "browser", "page", "lm_eval_logs"})

#: A skip whose reason starts with this names a component a developer may legitimately lack
#: (a GPU, a cloud account). Under ``EVALSWEEP_REQUIRE_ALL=1`` (the full lane, as CI runs it)
#: every other skip fails the run: what ``scripts/setup-dev`` installs is required.
OPTIONAL_COMPONENT = "optional component:"

_skips: list[tuple[str, str]] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def _note_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith(OPTIONAL_COMPONENT):
        _skips.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skips and os.environ.get("EVALSWEEP_REQUIRE_ALL") == "1" and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _skips and os.environ.get("EVALSWEEP_REQUIRE_ALL") == "1":
        terminalreporter.section("required tests that skipped (the run fails)", red=True)
        for nodeid, reason in _skips:
            terminalreporter.line(f"{nodeid}: {reason}")


TOKENIZER_LINES = 3000
VOCAB_SIZE = 1024


#: Slices of the public benchmark files, in their original formats (tests/data/README.md).
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Real MMLU, GSM8K, ARC, HellaSwag, HumanEval and MBPP rows, shipped in ``tests/data``."""
    return TEST_DATA


@pytest.fixture
def anyio_backend() -> str:
    """The event loop of the async (MCP client) tests."""
    return "asyncio"


@pytest.fixture
def agent_env(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An agent's world: a private, empty config (secrets live beside it) and the test data."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text("")
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(config))
    monkeypatch.setenv("EVALSWEEP_DATA_DIR", str(data_dir))
    return config


@pytest.fixture(scope="session")
def tokenizer(data_dir: Path):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer trained on local MMLU and GSM8K text."""
    from evalsweep.demo import build_tokenizer, corpus_from_data_dir

    return build_tokenizer(
        corpus_from_data_dir(data_dir, max_lines=TOKENIZER_LINES), vocab_size=VOCAB_SIZE
    )


@pytest.fixture(scope="session")
def checkpoint_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


def _build(root: Path, name: str, tokenizer, **kwargs: object) -> Path:  # type: ignore[no-untyped-def]
    from evalsweep.demo import build_checkpoint

    return build_checkpoint(
        root / name, tokenizer, n_layer=2, width=32, n_head=2, max_positions=2048, **kwargs
    )


@pytest.fixture(scope="session")
def gpt2_a(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-2, seed 0."""
    return _build(checkpoint_root, "gpt2-a", tokenizer, architecture="gpt2", seed=0)


@pytest.fixture(scope="session")
def gpt2_b(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-2 of the same shape as ``gpt2_a``, seed 1 (different weights)."""
    return _build(checkpoint_root, "gpt2-b", tokenizer, architecture="gpt2", seed=1)


@pytest.fixture(scope="session")
def gpt2_c(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-2 of the same shape, seed 2."""
    return _build(checkpoint_root, "gpt2-c", tokenizer, architecture="gpt2", seed=2)


@pytest.fixture(scope="session")
def llama_checkpoint(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny Llama-architecture model (rotary positions, RMSNorm, untied head), seed 3."""
    return _build(checkpoint_root, "llama", tokenizer, architecture="llama", seed=3)


@pytest.fixture(scope="session")
def gpt_neo_checkpoint(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-Neo: a real architecture whose forward has no ``logits_to_keep``."""
    import torch
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    from evalsweep.demo._build import EOS

    torch.manual_seed(4)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = GPTNeoConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        attention_types=[[["global", "local"], 1]],
        window_size=256,
        max_position_embeddings=2048,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
    )
    out = checkpoint_root / "gpt-neo"
    GPTNeoForCausalLM(config).eval().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A fresh SQLite results file for one test (not created until a Store opens it)."""
    return tmp_path / "results.sqlite"


@pytest.fixture(scope="session", autouse=True)
def session_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """evalsweep's state directory (its per-user key) for this session: never the user's own."""
    path = tmp_path_factory.mktemp("state")
    path.chmod(0o700)
    os.environ["EVALSWEEP_STATE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def cli_env(session_state_dir: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: this one, offline, with a wide terminal."""
    env = dict(os.environ)
    env.update(OFFLINE_ENV)
    env["COLUMNS"] = "200"
    env.pop("EVALSWEEP_STORE", None)
    env.pop("EVALSWEEP_DATA_DIR", None)
    env.pop("EVALSWEEP_DEBUG", None)
    return env


def count_sample_rows(path: Path) -> int:
    """Rows in a store's ``samples`` table; 0 when the file or table was never created."""
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "samples" not in tables:
            return 0
        return int(conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0])


@pytest.fixture
def sample_rows():  # type: ignore[no-untyped-def]
    """``sample_rows(path)``: number of stored sample rows in a results file."""
    return count_sample_rows


@dataclass
class Ran:
    """What one ``evalsweep`` command gave: exit status and both streams."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(
    args: Sequence[object],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    check: bool = False,
) -> Ran:
    """``evalsweep ARGS`` in this process, through click's test runner.

    For every test that is about what a command does and prints: no interpreter
    start and no second import of torch. ``env`` is the command's whole
    environment (variables of this process that it lacks are unset while the
    command runs). An exception that escapes the command is written to
    ``stderr`` as the traceback a user would see, so that tests which assert
    there is none still can. ``check``: assert the command succeeded.
    """
    from click.testing import CliRunner

    from evalsweep.cli import main

    overrides: dict[str, str | None] = {}
    if env is not None:
        overrides = {key: value for key, value in env.items() if os.environ.get(key) != value}
        overrides.update({key: None for key in os.environ if key not in env})
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:  # click 8.2+: stderr is always apart
        runner = CliRunner()
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = runner.invoke(main, [str(arg) for arg in args], env=overrides, input=input)
    finally:
        os.chdir(before)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    if check:
        assert result.exit_code == 0, stderr
    return Ran(result.exit_code, result.stdout, stderr)


#: The command that runs evalsweep as its own process, with this interpreter.
EVALSWEEP_COMMAND = [sys.executable, "-m", "evalsweep"]


def run_cli_process(
    args: Sequence[object],
    env: dict[str, str],
    cwd: Path | None = None,
    timeout: float = 300,
    input: str | None = None,
) -> Ran:
    """``evalsweep ARGS`` as its own process: for tests about the process itself
    (signals, exit on a kill, stdin and terminals, what reaches another process)."""
    done = subprocess.run(
        [*EVALSWEEP_COMMAND, *map(str, args)],
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)

"""One definition each: the version, the report's assets and number formats; a light report path."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tomllib
from contextlib import closing
from fnmatch import fnmatch
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalsweep
from evalsweep import _numbers
from evalsweep.cli import main
from evalsweep.report import _html, _markdown

ROOT = Path(__file__).resolve().parents[1]
V1_STORE = Path(__file__).parent / "data" / "stores" / "v1.sqlite"
#: Runs the CLI, then says on stderr which heavy modules the process imported.
PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['evalsweep', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('evalsweep', run_name='__main__')\n"
    "finally:\n"
    "    heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
    "    sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
)


def test_the_version_is_pyproject_s() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert evalsweep.__version__ == declared
    shown = CliRunner().invoke(main, ["--version"])
    assert shown.exit_code == 0 and declared in shown.output


def test_every_report_asset_is_package_data_and_is_inlined() -> None:
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["evalsweep"]
    assets = sorted((ROOT / "src" / "evalsweep" / "report" / "assets").iterdir())
    assert {a.suffix for a in assets} == {".css", ".js"}
    for asset in assets:
        inside = asset.relative_to(ROOT / "src" / "evalsweep").as_posix()
        assert any(fnmatch(inside, pattern) for pattern in globs), inside
        assert _html._asset(asset.name) == asset.read_text(encoding="utf-8")


def test_html_and_markdown_write_numbers_with_the_same_functions() -> None:
    for module in (_html, _markdown):
        assert module._fmt is _numbers.fixed
        assert module.difference is _numbers.difference  # a difference: always in points
        assert module.interval is _numbers.interval
        assert module._p is _numbers.p_value


@pytest.mark.parametrize(
    ("function", "value", "text"),
    [
        (_numbers.fixed, 0.63125, "0.6312"),
        (_numbers.fixed, float("nan"), "n/a"),
        (_numbers.fixed, None, "n/a"),
        (_numbers.points, 0.0125, "+1.2"),
        (_numbers.points, -0.004, "-0.4"),
        (_numbers.points, float("inf"), "n/a"),
        (_numbers.p_value, 0.0123, "0.012"),
        (_numbers.p_value, 0.00012345, "0.00012"),
        (_numbers.p_value, float("nan"), "n/a"),
    ],
)
def test_numbers_are_written_one_way(function: object, value: object, text: str) -> None:
    assert function(value) == text  # type: ignore[operator]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A store with real rows of two checkpoints (written by an earlier version)."""
    path = tmp_path_factory.mktemp("light") / "results.sqlite"
    shutil.copyfile(V1_STORE, path)
    with closing(sqlite3.connect(path)) as conn:
        (document,) = [json.loads(r[0]) for r in conn.execute("SELECT document FROM runs")]
    return path, [c["reference"] for c in document["checkpoints"]]


@pytest.mark.parametrize("command", ["compare", "flips", "report"])
def test_reading_stored_results_imports_neither_torch_nor_transformers(
    command: str, stored: tuple[Path, list[str]], tmp_path: Path, cli_env: dict[str, str]
) -> None:
    store, (first, second) = stored
    tasks = ["--tasks", "mmlu,gsm8k", "--num-fewshot", "1", "--store", str(store)]
    argv = {
        "compare": ["compare", first, second, *tasks],
        "flips": ["flips", second, "--baseline", first, *tasks],
        "report": ["report", first, second, *tasks, "--markdown", str(tmp_path / "r.md")],
    }[command]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY=\n" in done.stderr, done.stderr

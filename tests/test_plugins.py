"""Extensions from installed packages: tasks, backends and target kinds through entry points.

The example package (``examples/evalsweep-example-plugin``) and two packages written
here (one whose entry points do not load, one whose names are evalsweep's own) are
installed with pip (``--no-deps --no-build-isolation --no-index``: nothing is
downloaded) into folders put on a subprocess's ``PYTHONPATH``, where
``importlib.metadata`` finds their entry points through their ``.dist-info``; the real
command line then runs in that subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Ran, run_cli_process

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "evalsweep-example-plugin"
EXAMPLE_SOURCE = "evalsweep-example-plugin 0.1.0"


def install(package: Path, where: Path) -> Path:
    """pip-install a copy of ``package`` (its folder stays clean) into ``where``."""
    copy = where.with_name(where.name + "-src")
    shutil.copytree(package, copy)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(where), str(copy)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert list(where.glob("*.dist-info")), "pip wrote no .dist-info"
    return where


def write_package(root: Path, name: str, entry_points: str, module: str) -> Path:
    """A package folder: ``pyproject.toml`` with ``entry_points`` and one module."""
    package = name.replace("-", "_")
    (root / "src" / package).mkdir(parents=True)
    (root / "src" / package / "__init__.py").write_text(textwrap.dedent(module))
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "{name}"
            version = "0.1.0"

            [tool.setuptools.packages.find]
            where = ["src"]
            """
        )
        + textwrap.dedent(entry_points)
    )
    return root


def environment(cli_env: dict[str, str], *sites: Path) -> dict[str, str]:
    env = dict(cli_env)
    paths = [*map(str, sites), str(ROOT / "src"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def evalsweep(args: list[object], env: dict[str, str], cwd: Path) -> Ran:
    return run_cli_process(args, env=env, cwd=cwd)


def listed(args: list[object], env: dict[str, str], cwd: Path) -> tuple[dict[str, dict], Ran]:
    """A listing command's ``--json`` rows by name, and what the command gave."""
    ran = evalsweep([*args, "--json"], env, cwd)
    assert ran.returncode == 0, ran.stderr
    return {row["name"]: row for row in json.loads(ran.stdout)}, ran


def errors(ran: Ran) -> list[str]:
    """The error lines of stderr: exactly one, and no traceback."""
    lines = [line for line in ran.stderr_lines if line.startswith("evalsweep: error:")]
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    return lines


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(EXAMPLE, tmp_path_factory.mktemp("example") / "site")


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package whose task, backend and target kind do not load, and whose other names
    are evalsweep's own (``mmlu``, ``leaderboard``, ``hf``, ``ssh``)."""
    root = tmp_path_factory.mktemp("broken")
    package = write_package(
        root / "package",
        "evalsweep-broken-plugin",
        """
        [project.entry-points."evalsweep.tasks"]
        broken = "evalsweep_no_such_module:Task"
        impostor = "evalsweep_broken_plugin:Impostor"
        mmlu = "evalsweep_broken_plugin:Impostor"
        leaderboard = "evalsweep_broken_plugin:Impostor"

        [project.entry-points."evalsweep.backends"]
        brokenbackend = "evalsweep_broken_plugin:NotThere"
        hf = "evalsweep_broken_plugin:Impostor"

        [project.entry-points."evalsweep.targets"]
        ssh = "evalsweep_broken_plugin:Impostor"
        """,
        """
        def Impostor(*args, **kwargs):
            raise RuntimeError("the impostor ran")
        """,
    )
    return install(package, root / "site")


# -- the example package ---------------------------------------------------------------------


def test_example_package_is_listed_with_its_name_and_version(
    example_site: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = environment(cli_env, example_site)
    rows, tasks = listed(["tasks"], env, tmp_path)
    assert rows["capitals"]["source"] == EXAMPLE_SOURCE
    assert rows["capitals"]["entry_point"] == (
        "evalsweep.tasks: capitals = evalsweep_example_plugin.capitals:Capitals"
    )
    assert rows["capitals"]["version"] == "capitals v1" and rows["capitals"]["metrics"] == ["acc"]
    assert rows["mmlu"]["source"] == "built-in" and rows["mmlu"]["entry_point"] is None
    text = evalsweep(["tasks"], env, tmp_path)
    assert f"capitals  capitals v1, 0-shot, metrics: acc ({EXAMPLE_SOURCE})" in text.stdout
    assert tasks.stderr == text.stderr == ""

    backends = evalsweep(["backends", "--json"], env, tmp_path)
    assert backends.returncode == 0, backends.stderr
    by_name = {row["name"]: row for row in json.loads(backends.stdout)}
    assert list(by_name) == ["hf", "vllm", "openai", "shortest"]
    assert by_name["shortest"]["source"] == EXAMPLE_SOURCE and by_name["shortest"]["error"] is None
    assert {by_name[n]["source"] for n in ("hf", "vllm", "openai")} == {"built-in"}

    kinds = evalsweep(["targets", "--kinds"], env, tmp_path)
    assert kinds.returncode == 0, kinds.stderr
    assert f"priced-local  This machine, at the hourly rate the configuration gives. " \
        f"({EXAMPLE_SOURCE})" in kinds.stdout  # fmt: skip
    assert "ssh  a machine reached over ssh (built-in)" in kinds.stdout


def test_example_task_runs_end_to_end_on_a_tiny_checkpoint(
    example_site: Path, cli_env: dict[str, str], tmp_path: Path, gpt2_a: Path, gpt2_b: Path
) -> None:
    env = environment(cli_env, example_site)
    store = tmp_path / "results.sqlite"
    ran = evalsweep(
        ["run", gpt2_a, gpt2_b, "--tasks", "capitals", "--device", "cpu", "--store", store,
         "--out", tmp_path / "out", "--json"],
        env, tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    document = json.loads(ran.stdout)
    rows = [
        json.loads(line)
        for line in (EXAMPLE / "src/evalsweep_example_plugin/data/capitals.jsonl")
        .read_text()
        .splitlines()
    ]  # noqa: E501
    results = {(r["checkpoint"], r["metric"]): r for r in document["results"]}
    for checkpoint in (str(gpt2_a), str(gpt2_b)):
        assert results[(checkpoint, "acc")]["task"] == "capitals"
        assert results[(checkpoint, "acc")]["n"] == len(rows)
    samples = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 2 * len(rows)
    assert {json.loads(line)["task"] for line in samples} == {"capitals"}

    # The same task on the example's backend (no model) and target kind: the backend's
    # rule, applied to the shipped rows, is the score; the target's rate is the record's.
    config = tmp_path / "config.toml"
    config.write_text('[targets.mine]\nkind = "priced-local"\nrate = 2.5\n')
    refused = evalsweep(["targets"], {**env, "EVALSWEEP_CONFIG": str(config)}, tmp_path)
    assert refused.returncode == 2
    assert errors(refused)[0].endswith(
        "[targets.mine] unknown setting(s) rate for kind 'priced-local' (allowed: currency, "
        "hourly_rate)"
    )
    config.write_text('[targets.mine]\nkind = "priced-local"\nhourly_rate = 2.5\n')
    shortest = evalsweep(
        ["run", gpt2_a, "--tasks", "capitals", "--backend", "shortest", "--target", "mine",
         "--store", store, "--json"],
        {**env, "EVALSWEEP_CONFIG": str(config)}, tmp_path,
    )  # fmt: skip
    assert shortest.returncode == 0, shortest.stderr
    document = json.loads(shortest.stdout)
    shortest_wins = [
        min(range(len(r["choices"])), key=lambda i: (len(r["choices"][i]), i)) == r["answer"]
        for r in rows
    ]
    (acc,) = [r["value"] for r in document["results"] if r["metric"] == "acc"]
    assert acc == pytest.approx(sum(shortest_wins) / len(rows))
    assert 0 < sum(shortest_wins) < len(rows)  # the rule tells answers apart
    assert document["compute"]["kind"] == "priced-local"
    assert document["compute"]["hourly_rate"] == 2.5
    assert document["settings"]["backend"]["backend"] == "shortest"


# -- packages that fail, and names that are evalsweep's own ---------------------------------


def test_a_broken_entry_point_breaks_only_what_names_it(
    broken_site: Path, cli_env: dict[str, str], tmp_path: Path, gpt2_a: Path, data_dir: Path
) -> None:
    env = environment(cli_env, broken_site)
    for command in ([], ["run"], ["tasks"]):
        helped = evalsweep([*command, "--help"], env, tmp_path)
        assert helped.returncode == 0 and "Usage:" in helped.stdout, helped.stderr
        assert helped.stderr == ""

    builtin = evalsweep(
        ["run", gpt2_a, "--tasks", "mmlu_abstract_algebra", "--limit", "2", "--device", "cpu",
         "--data-dir", data_dir, "--store", tmp_path / "s.db", "--json"],
        env, tmp_path,
    )  # fmt: skip
    assert builtin.returncode == 0, builtin.stderr
    assert "broken" not in builtin.stderr and "refused" not in builtin.stderr

    task = evalsweep(
        ["run", gpt2_a, "--tasks", "broken", "--store", tmp_path / "s.db"], env, tmp_path
    )
    assert task.returncode == 2
    (line,) = errors(task)
    assert line.startswith("evalsweep: error: task 'broken' of evalsweep-broken-plugin 0.1.0")
    assert "entry point evalsweep.tasks: broken = evalsweep_no_such_module:Task" in line
    assert "ModuleNotFoundError" in line and "Traceback" not in task.stderr

    backend = evalsweep(
        ["run", gpt2_a, "--tasks", "mmlu_abstract_algebra", "--limit", "2", "--data-dir",
         data_dir, "--backend", "brokenbackend", "--store", tmp_path / "other.db"],
        env, tmp_path,
    )  # fmt: skip
    assert backend.returncode == 2
    (line,) = errors(backend)
    assert "backend 'brokenbackend' of evalsweep-broken-plugin 0.1.0 does not load" in line
    assert "evalsweep.backends: brokenbackend = evalsweep_broken_plugin:NotThere" in line
    assert "Traceback" not in backend.stderr

    impostor = evalsweep(
        ["run", gpt2_a, "--tasks", "impostor", "--store", tmp_path / "s.db"], env, tmp_path
    )
    assert impostor.returncode == 2
    (line,) = errors(impostor)
    assert line == (
        "evalsweep: error: task 'impostor' of evalsweep-broken-plugin 0.1.0 (entry point "
        "evalsweep.tasks: impostor = evalsweep_broken_plugin:Impostor) failed: RuntimeError: "
        "the impostor ran"
    )

    backends, _ = listed(["backends"], env, tmp_path)
    assert "does not load" in backends["brokenbackend"]["error"]


def test_a_package_cannot_take_a_builtin_name(
    broken_site: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = environment(cli_env, broken_site)
    rows, ran = listed(["tasks"], env, tmp_path)
    assert rows["mmlu"]["source"] == "built-in" and rows["mmlu"]["version"].startswith("lm-eval")
    assert [row["kind"] for row in json.loads(ran.stdout) if row["name"] == "leaderboard"] == [
        "suite"
    ]
    refused = [line for line in ran.stderr_lines if "refused" in line]
    assert sorted(refused) == sorted(
        f"evalsweep: warning: task {name!r} of evalsweep-broken-plugin 0.1.0 is refused: "
        f"evalsweep's own task has that name (entry point evalsweep.tasks: {name} = "
        "evalsweep_broken_plugin:Impostor)"
        for name in ("leaderboard", "mmlu")
    )  # each said once, however often the names are read

    backends = evalsweep(["backends", "--json"], env, tmp_path)
    assert {r["name"]: r["source"] for r in json.loads(backends.stdout)}["hf"] == "built-in"
    assert [line for line in backends.stderr_lines if "refused" in line] == [
        "evalsweep: warning: backend 'hf' of evalsweep-broken-plugin 0.1.0 is refused: "
        "evalsweep's own backend has that name (entry point evalsweep.backends: hf = "
        "evalsweep_broken_plugin:Impostor)"
    ]
    kinds = evalsweep(["targets", "--kinds", "--json"], env, tmp_path)
    assert {r["name"]: r["source"] for r in json.loads(kinds.stdout)}["ssh"] == "built-in"
    assert any("target kind 'ssh'" in line and "refused" in line for line in kinds.stderr_lines)

"""Training runs through the agent: the real MCP server on stdio, tiny checkpoints.

An agent names a run folder (inside the folders the person's configuration allows) and
a selection; the quote lists the selected checkpoints in step order, each pinned to its
identity; the job runs exactly those; ``run_trend`` says the trend in words from the
same statistics ``evalsweep compare`` computes. A checkpoint folder whose name could
rewrite a screen is left out and shown escaped, never as itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).parent))
from test_agent_gate import approve_in_terminal, error_text, result, wait_for_end  # noqa: E402

TASK = "mmlu_abstract_algebra"
#: A checkpoint folder name with one step number that tries to rewrite the approval: a
#: newline, an ANSI erase-line, a right-to-left override and a forged line (one number
#: in all, so it names a step).
HOSTILE = "checkpoint-250\n\x1b[K\u202eapproved: free"


@pytest.fixture
def run_world(tmp_path: Path, gpt2_a: Path, gpt2_b: Path, gpt2_c: Path) -> tuple[Path, Path, Path]:
    """(allowed folder, its run, a run outside it): steps 50, 100, 300 (their names sort
    out of step order) and the hostile folder."""
    allowed = tmp_path / "runs"
    run = allowed / "run1"
    run.mkdir(parents=True)
    for step, model in ((100, gpt2_a), (300, gpt2_b), (50, gpt2_c)):
        (run / f"checkpoint-{step}").symlink_to(model, target_is_directory=True)
    (run / HOSTILE).symlink_to(gpt2_a, target_is_directory=True)
    outside = tmp_path / "elsewhere" / "run2"
    outside.mkdir(parents=True)
    (outside / "checkpoint-1").symlink_to(gpt2_a, target_is_directory=True)
    return allowed, run, outside


def server(
    tmp_path: Path, store_path: Path, env: dict[str, str], allowed: Path, extra: str = ""
) -> StdioServerParameters:
    config = tmp_path / "config.toml"
    config.write_text(f"[agent]\nrun_dirs = [{json.dumps(str(allowed))}]\n{extra}")
    return StdioServerParameters(
        command=sys.executable, args=["-m", "evalsweep", "mcp", "--store", str(store_path)],
        env={**env, "EVALSWEEP_CONFIG": str(config)}, cwd=str(tmp_path),
    )  # fmt: skip


def steps_of(quote: dict[str, Any]) -> list[int]:
    return [c["step"] for c in quote["run"]["checkpoints"]]


@pytest.mark.anyio
async def test_a_run_is_quoted_in_step_order_selected_pinned_and_kept_in_its_folders(
    tmp_path: Path,
    store_path: Path,
    cli_env: dict[str, str],
    data_dir: Path,
    run_world: tuple[Path, Path, Path],
) -> None:
    allowed, run, outside = run_world
    env = {**cli_env, "EVALSWEEP_DATA_DIR": str(data_dir)}
    base = {"checkpoints": [str(run)], "tasks": [TASK], "limit": 1}
    async with Client(server(tmp_path, store_path, env, allowed), read_timeout_seconds=120) as c:
        whole = result(await c.call_tool("quote_sweep", base))
        chosen = {
            "steps": result(await c.call_tool("quote_sweep", {**base, "steps": "60:"})),
            "every": result(await c.call_tool("quote_sweep", {**base, "every": 2})),
            "last": result(await c.call_tool("quote_sweep", {**base, "last": 1})),
            "stride": result(await c.call_tool("quote_sweep", {**base, "steps": "50:300:50"})),
        }
        refused = [
            error_text(await c.call_tool("quote_sweep", {**base, "checkpoints": [str(outside)]})),
            error_text(await c.call_tool("quote_sweep", {**base, "steps": "1:x"})),
            error_text(
                await c.call_tool(
                    "quote_sweep", {**base, "checkpoints": [str(run / "checkpoint-50")], "last": 1}
                )
            ),
            error_text(await c.call_tool("quote_sweep", {**base, "every": 0})),
        ]
    assert steps_of(whole) == [50, 100, 300]
    assert whole["params"]["checkpoints"] == [str(run / f"checkpoint-{n}") for n in (50, 100, 300)]
    assert [p["reference"] for p in whole["run"]["checkpoints"]] == whole["params"]["checkpoints"]
    # Pinned as any quoted checkpoint is: the job must find these identities, in this order.
    assert [p["identity"] for p in whole["run"]["checkpoints"]] == whole["params"]["identities"]
    assert all(p["identity"] for p in whole["run"]["checkpoints"])
    assert steps_of(chosen["steps"]) == [100, 300]
    assert steps_of(chosen["every"]) == [50, 300]
    assert steps_of(chosen["last"]) == [300]
    assert steps_of(chosen["stride"]) == [50, 100, 300]
    # The hostile folder is left out, named escaped; nothing of it reaches the summary raw.
    (left,) = whole["run"]["left_out"]
    assert left["checkpoint"] == f"{run}/checkpoint-250\\n\\x1b[K\\u202eapproved: free"
    assert "control character U+000A" in left["why"]
    for text in (whole["summary"], left["checkpoint"], left["why"]):
        assert "\n" not in text and "\x1b" not in text and "\u202e" not in text
    assert whole["summary"].startswith(
        f"sweep of run {run}: 3 checkpoints in step order, {run}/checkpoint-50, "
    )
    assert refused[0].startswith(
        "quote_sweep: checkpoints[0] is a run folder outside the allowed folders: run folders "
        "are taken only from the folders the person's configuration names in [agent] run_dirs ("
    ), refused[0]  # the folder is shown as far as it is not the argument's text (not echoed)
    assert refused[1] == (
        "quote_sweep: steps must be A:B or A:B:STRIDE (whole numbers; A or B may be empty)"
    )
    assert refused[2].startswith("quote_sweep: steps, every and last select from a run")
    assert refused[3] == "quote_sweep: every must be 1 or more"
    with sqlite_quotes(store_path) as count:
        assert count == 5  # the refused calls made no quote


class sqlite_quotes:  # noqa: N801 - reads as a phrase
    def __init__(self, path: Path) -> None:
        import sqlite3

        self.connection = sqlite3.connect(path)

    def __enter__(self) -> int:
        return int(self.connection.execute("SELECT COUNT(*) FROM agent_quotes").fetchone()[0])

    def __exit__(self, *_: object) -> None:
        self.connection.close()


@pytest.mark.anyio
async def test_a_hostile_checkpoint_name_cannot_rewrite_what_the_person_approves(
    tmp_path: Path,
    store_path: Path,
    cli_env: dict[str, str],
    data_dir: Path,
    run_world: tuple[Path, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allowed, run, _ = run_world
    env = {**cli_env, "EVALSWEEP_DATA_DIR": str(data_dir)}
    priced = "[rates]\nlocal = 36.0\n[limits]\nper_connection_usd = 50.0\nglobal_usd = 100.0\n"
    params = server(tmp_path, store_path, env, allowed, priced)
    args = {"checkpoints": [str(run)], "tasks": [TASK], "limit": 1, "last": 2}
    async with Client(params, read_timeout_seconds=120) as client:
        quote = result(await client.call_tool("quote_sweep", args))
    assert quote["needs_approval"]
    monkeypatch.setenv("EVALSWEEP_CONFIG", params.env["EVALSWEEP_CONFIG"])  # type: ignore[index]
    code, output = approve_in_terminal(store_path, quote["quote_id"], b"n")
    assert code == 1 and "not approved" in output
    for raw in ("\x1b[K", "\u202e", "\napproved: free", "\r\napproved"):
        assert raw not in output, raw
    lines = [line.strip() for line in output.replace("\r", "").splitlines()]
    pinned = [line for line in lines if line.startswith("checkpoint ")]
    assert [line.split()[1:4] for line in pinned] == [
        [f"{run}/checkpoint-100", "(step", "100)"], [f"{run}/checkpoint-300", "(step", "300)"],
    ]  # fmt: skip
    (left,) = [line for line in lines if line.startswith("left out of the run:")]
    assert "checkpoint-250\\n\\x1b[K\\u202eapproved: free (its name contains a control" in left
    assert not any(line.startswith("approved") for line in lines)


@pytest.mark.anyio
async def test_a_run_job_runs_the_pinned_checkpoints_and_its_trend_is_the_terminals(
    tmp_path: Path,
    store_path: Path,
    cli_env: dict[str, str],
    data_dir: Path,
    run_world: tuple[Path, Path, Path],
) -> None:
    allowed, run, _ = run_world
    env = {**cli_env, "EVALSWEEP_DATA_DIR": str(data_dir)}
    args = {"checkpoints": [str(run)], "tasks": [TASK], "limit": 4, "num_fewshot": 0}
    async with Client(server(tmp_path, store_path, env, allowed), read_timeout_seconds=300) as c:
        quote = result(await c.call_tool("quote_sweep", args))
        early = error_text(await c.call_tool("run_trend", {"job_id": "j-0123456789"}))
        started = result(await c.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        ended = await wait_for_end(c, started["job_id"], timeout=600)
        assert ended["status"] == "finished", ended
        trend = result(await c.call_tool("run_trend", {"job_id": started["job_id"]}))
        wrong = error_text(
            await c.call_tool("run_trend", {"job_id": started["job_id"], "best_by": ["mmlu"]})
        )
    assert "no job" in early
    assert wrong.startswith(f"run_trend: best_by[0] is not a task of job {started['job_id']}")
    pinned = quote["params"]["checkpoints"]
    # One source: the terminal's compare of the same checkpoints holds the same statistics.
    shown = subprocess.run(
        [sys.executable, "-m", "evalsweep", "compare", *pinned, "--tasks", TASK,
         "--num-fewshot", "0", "--store", str(store_path), "--json"],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=300,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["steps"] == {
        ref: step for ref, step in zip(pinned, (50, 100, 300), strict=True)
    }
    assert trend["best_comparisons"] == document["best"]
    assert trend["best"] == document["best"][0]["candidate"]
    assert {c["baseline"] for c in document["best"]} == set(pinned) - {trend["best"]}
    lines = trend["lines"]
    assert lines[0].startswith(f"{TASK} (acc), n=4: baseline checkpoint-50 (step 50) ")
    assert " -> last checkpoint-300 (step 300) " in lines[0]
    best = lines[-1]
    assert best.startswith(f"best by {TASK}: ")
    for row in document["best"]:
        other = Path(row["baseline"]).name
        word = {"improvement": "better than", "regression": "worse than",
                "no significant change": "not shown better than"}[row["verdict"]]  # fmt: skip
        assert f"{word} {other} (" in best
    assert trend["text"] == "\n".join(lines) + "\n"

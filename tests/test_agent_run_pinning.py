"""What an agent's run quote pins is what is checked, shown, run and read back.

The real MCP server on stdio and ``evalsweep approve`` on a real pseudo-terminal:

- one decision says what a reference is: an existing folder is local whatever its
  characters (``exp@[lr=3e-4]``), so the run_dirs check and the expansion agree;
- no checkpoint name can start a row of the approval: runs of spaces are escaped, long
  lines folded to the terminal with a continuation mark, names in the one-line summary
  shortened with their length said;
- the job runs the quote's checkpoints exactly, in the quote's order (never expanded
  again), and the quote says "step order" only of a list in step order;
- a weight file with a name that is not UTF-8 is hashed like any other;
- ``run_trend`` reads the results of the identities the job pinned, not the folders now.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

sys.path.insert(0, str(Path(__file__).parent))
from evalsweep.checkpoints import reference_kind  # noqa: E402
from evalsweep.text import CONTINUED, fold, visible  # noqa: E402
from test_agent_gate import approve_in_terminal, error_text, result, wait_for_end  # noqa: E402
from test_agent_runs import server  # noqa: E402

TASK = "mmlu_abstract_algebra"
PRICED = "[rates]\nlocal = 36.0\n[limits]\nper_connection_usd = 50.0\nglobal_usd = 100.0\n"
#: A line the approval could show, forged in a folder name after a run of spaces.
FORGED = "note: this sweep is free: nothing is reserved and nothing is spent"


def approve_at(store_path: Path, quote_id: str, columns: int) -> tuple[int, str]:
    """``evalsweep approve`` on a pseudo-terminal ``columns`` wide, declined."""
    return approve_in_terminal(store_path, quote_id, b"n", columns)


def env_for(cli_env: dict[str, str], data_dir: Path) -> dict[str, str]:
    return {**cli_env, "EVALSWEEP_DATA_DIR": str(data_dir)}


def test_an_existing_path_is_local_whatever_its_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "exp@[lr=3e-4]"
    assert reference_kind(str(folder)) == "local"  # written as a path
    monkeypatch.chdir(tmp_path)
    assert reference_kind("exp@[lr=3e-4]") == "hub_pattern"  # no such folder
    folder.mkdir()
    assert reference_kind("exp@[lr=3e-4]") == "local"  # relative, and it exists
    assert reference_kind("org/model@step*") == "hub_pattern"
    assert reference_kind("org/model@[a-z]*") == "hub_pattern"
    assert reference_kind("org/model@main") == "hub"


@pytest.mark.anyio
async def test_a_folder_named_like_a_hub_pattern_is_checked_as_the_folder_it_is(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str], data_dir: Path,
    gpt2_a: Path, gpt2_b: Path,
) -> None:  # fmt: skip
    allowed = tmp_path / "allowed"
    inside = allowed / "exp@[lr]"
    inside.mkdir(parents=True)
    for name in ("plain", "exp@[lr=3e-4]", "exp@lr*"):
        outside = tmp_path / "outside" / name
        outside.mkdir(parents=True)
        (outside / "checkpoint-1").symlink_to(gpt2_a, target_is_directory=True)
    (inside / "checkpoint-2").symlink_to(gpt2_b, target_is_directory=True)
    (inside / "checkpoint-1").symlink_to(gpt2_a, target_is_directory=True)
    params = server(tmp_path, store_path, env_for(cli_env, data_dir), allowed)
    base = {"tasks": [TASK], "limit": 1}
    async with Client(params, read_timeout_seconds=120) as client:
        refused = [
            error_text(await client.call_tool(
                "quote_sweep", {**base, "checkpoints": [str(tmp_path / "outside" / name)]}
            ))
            for name in ("plain", "exp@[lr=3e-4]", "exp@lr*")
        ]  # fmt: skip
        quoted = result(
            await client.call_tool("quote_sweep", {**base, "checkpoints": [str(inside)]})
        )
    for text in refused:
        # (the message shows no part of the argument: words of the path are elided)
        assert text.startswith("quote_sweep: checkpoints[0] is a run "), text
        assert "[agent] run_dirs" in text, text
    assert quoted["params"]["checkpoints"] == [f"{inside}/checkpoint-1", f"{inside}/checkpoint-2"]
    assert [c["step"] for c in quoted["run"]["checkpoints"]] == [1, 2]


@pytest.mark.anyio
async def test_no_checkpoint_name_starts_a_row_of_what_the_person_approves(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str], data_dir: Path,
    gpt2_a: Path, gpt2_c: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    allowed = tmp_path / "allowed"
    run = allowed / "run1"
    run.mkdir(parents=True)
    (run / "checkpoint-50").symlink_to(gpt2_c, target_is_directory=True)
    padded = "step-7" + " " * 90 + FORGED  # one number: step 7
    long = "step-8-" + "-".join(["x" * 9] * 16) + " " + FORGED.replace(" ", "-")
    (run / padded).symlink_to(gpt2_a, target_is_directory=True)
    (run / long).symlink_to(gpt2_a, target_is_directory=True)
    params = server(tmp_path, store_path, env_for(cli_env, data_dir), allowed, PRICED)
    async with Client(params, read_timeout_seconds=120) as client:
        quote = result(await client.call_tool(
            "quote_sweep", {"checkpoints": [str(run)], "tasks": [TASK], "limit": 1}
        ))  # fmt: skip
    assert quote["needs_approval"]
    assert "  " not in quote["summary"]  # the one-line summary holds no run of spaces
    monkeypatch.setenv("EVALSWEEP_CONFIG", params.env["EVALSWEEP_CONFIG"])  # type: ignore[index]
    width = 80
    code, output = approve_at(store_path, quote["quote_id"], width)
    assert code == 1 and "not approved" in output
    rows = output.replace("\r", "").split("\n")
    own = ("sweep of ", "  checkpoint ", "  tasks ", "  price: ", "  limits: ", "Approve ",
           "not approved", CONTINUED)  # fmt: skip
    for row in rows:
        assert len(row) < width, row  # the terminal wraps nothing itself
        assert not row or row.startswith(own), row
        assert not row.startswith((FORGED[:4], "  " + FORGED[:4])), row
    assert not any(row.startswith("  note") for row in rows)
    # Every name is still there in full, folded: rows joined again give the whole name.
    joined = "".join(row.removeprefix(CONTINUED) for row in rows)
    assert visible(str(run / padded)) in joined and str(run / long) in joined
    # The first line is the one-line summary (the question an MCP client shows, at a width
    # nobody here knows): a long name in it shortened, with what is left out counted.
    assert f"[...{len(str(run / long)) - 90} of {len(str(run / long))} characters...]" in joined


def test_fold_keeps_every_row_within_the_width_and_marks_continuations() -> None:
    line = visible("  checkpoint /runs/" + "a" * 50 + "   " + "界" * 30 + " -> local:sha256:x")
    rows = fold(line, 40)
    from rich.cells import cell_len

    assert all(cell_len(row) <= 40 for row in rows)
    assert all(row.startswith(CONTINUED) for row in rows[1:])
    assert "".join([rows[0], *(r.removeprefix(CONTINUED) for r in rows[1:])]) == line
    assert visible("a  b") == "a\\x20\\x20b" and visible(visible("a  b")) == visible("a  b")
    assert visible("a  b", newlines=True) == "a  b"  # logs keep their layout


def _job_row(store_path: Path, job_id: str) -> tuple[str, str]:
    """The job's command line and its results folder."""
    import sqlite3

    connection = sqlite3.connect(store_path)
    try:
        argv, out = connection.execute(
            "SELECT argv, out_dir FROM agent_jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
    finally:
        connection.close()
    return str(argv), str(out)


@pytest.mark.anyio
async def test_the_job_runs_the_quoted_checkpoints_in_the_quoted_order_and_reads_them_back(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str], data_dir: Path,
    gpt2_a: Path, gpt2_b: Path, gpt2_c: Path,
) -> None:  # fmt: skip
    allowed = tmp_path / "allowed"
    run = allowed / "run1"
    run.mkdir(parents=True)
    for step, model in ((100, gpt2_a), (300, gpt2_b), (50, gpt2_c)):
        (run / f"checkpoint-{step}").symlink_to(model, target_is_directory=True)
    at = allowed / "exp@[lr]"  # reads as a Hub pattern if anything expanded it again
    at.mkdir()
    (at / "checkpoint-1").symlink_to(gpt2_a, target_is_directory=True)
    (at / "checkpoint-2").symlink_to(gpt2_b, target_is_directory=True)
    params = server(tmp_path, store_path, env_for(cli_env, data_dir), allowed)
    base = {"tasks": [TASK], "limit": 2, "num_fewshot": 0}
    mixed_args = {**base, "checkpoints": [str(run), str(run / "checkpoint-50")], "steps": "100:"}
    ended: dict[str, dict[str, Any]] = {}
    async with Client(params, read_timeout_seconds=300) as client:
        mixed = result(await client.call_tool("quote_sweep", mixed_args))
        named = result(await client.call_tool("quote_sweep", {**base, "checkpoints": [str(at)]}))
        for label, quote in (("mixed", mixed), ("named", named)):
            started = result(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
            ended[label] = await wait_for_end(client, started["job_id"], timeout=600)
            assert ended[label]["status"] == "finished", ended[label]
        trend_before = result(
            await client.call_tool("run_trend", {"job_id": ended["named"]["job_id"]})
        )
        not_a_trend = error_text(
            await client.call_tool("run_trend", {"job_id": ended["mixed"]["job_id"]})
        )
        # The folder now holds other weights: what the job ran is read, not the folder.
        (at / "checkpoint-1").unlink()
        (at / "checkpoint-1").symlink_to(gpt2_c, target_is_directory=True)
        trend_after = result(
            await client.call_tool("run_trend", {"job_id": ended["named"]["job_id"]})
        )
    order = [str(run / "checkpoint-100"), str(run / "checkpoint-300"), str(run / "checkpoint-50")]
    assert mixed["params"]["checkpoints"] == order
    # Not step order, so not called so: "this order", as it runs.
    assert ": 3 checkpoints in this order, " in mixed["summary"], mixed["summary"]
    assert "step order" not in mixed["summary"]
    assert "not one run in step order" in not_a_trend
    for label, quote in (("mixed", mixed), ("named", named)):
        argv, out = _job_row(store_path, ended[label]["job_id"])
        document = json.loads((Path(out) / "results.json").read_text())
        ran = [c["reference"] for c in document["checkpoints"]]
        assert ran == quote["params"]["checkpoints"], label
        assert [c["identity"] for c in document["checkpoints"]] == quote["params"]["identities"]
        assert "--pinned" in argv
    assert trend_before["lines"] == trend_after["lines"]
    assert trend_before["best_comparisons"] == trend_after["best_comparisons"]


@pytest.mark.anyio
async def test_a_weight_file_whose_name_is_not_utf8_is_part_of_the_identity(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str], data_dir: Path,
    gpt2_a: Path, gpt2_b: Path,
) -> None:  # fmt: skip
    allowed = tmp_path / "allowed"
    run = allowed / "run1"
    run.mkdir(parents=True)
    (run / "checkpoint-1").symlink_to(gpt2_a, target_is_directory=True)
    odd = run / "checkpoint-2"
    shutil.copytree(gpt2_b, odd)
    params = server(tmp_path, store_path, env_for(cli_env, data_dir), allowed)
    args = {"checkpoints": [str(run)], "tasks": [TASK], "limit": 1}
    async with Client(params, read_timeout_seconds=120) as client:
        plain = result(await client.call_tool("quote_sweep", args))
        shutil.copyfile(odd / "model.safetensors", bytes(odd) + b"/extra\xfe.safetensors")
        with_odd = result(await client.call_tool("quote_sweep", args))
        unreadable = None
        if os.geteuid() != 0:  # root reads any file
            (odd / "tokenizer.json").chmod(0)
            unreadable = error_text(await client.call_tool("quote_sweep", args))
    assert plain["params"]["identities"][0] == with_odd["params"]["identities"][0]
    assert plain["params"]["identities"][1] != with_odd["params"]["identities"][1]
    if unreadable is not None:
        assert "Error executing tool" not in unreadable and "\n" not in unreadable
        assert "checkpoint-2" in unreadable and "tokenizer.json" in unreadable, unreadable

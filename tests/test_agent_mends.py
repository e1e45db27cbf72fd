"""The smaller guarantees: a stop never turns a finished job into a stopped one; the
terminal approval shows what it approves and refuses what cannot run before asking;
every approval attempt and a failed action's error text are audited; one prefix."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from evalsweep.agent import build_server
from evalsweep.errors import TargetError
from evalsweep.store import Store
from test_agent_gate import RentedBox, approve_in_terminal, sweep_args, wait_for_end

TASK = "mmlu_abstract_algebra"


@pytest.fixture
def agent_env(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        "[rates]\nlocal = 36.0\n[limits]\nper_connection_usd = 50.0\nglobal_usd = 100.0\n"
    )
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(config))
    monkeypatch.setenv("EVALSWEEP_DATA_DIR", str(data_dir))
    return config


def ok(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content[0].text
    return dict(call.structured_content)


def _group(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.anyio
async def test_a_stop_that_comes_after_the_job_finished_leaves_it_finished(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    async with Client(build_server(store_path, config={})) as client:
        quote = ok(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        job_id = ok(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))[
            "job_id"
        ]
        with sqlite3.connect(store_path) as conn:
            (pid,) = conn.execute(
                "SELECT pid FROM agent_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
        results = store_path.parent / "evalsweep-jobs" / job_id / "out" / "results.json"
        with anyio.fail_after(240):
            while not results.exists():
                await anyio.sleep(0.1)
        os.kill(pid, signal.SIGSTOP)  # the supervisor has not recorded the end yet
        try:
            with anyio.fail_after(60):  # the job itself ends with its work done
                while _group(pid) != [pid]:
                    await anyio.sleep(0.1)
            # The stop a watchdog or a person sends now comes after the job finished.
            ok(await client.call_tool("cancel_job", {"job_id": job_id}))
        finally:
            os.kill(pid, signal.SIGCONT)
        with anyio.fail_after(60):
            while _group(pid):
                await anyio.sleep(0.1)
        status = ok(await client.call_tool("job_status", {"job_id": job_id}))
    assert status["status"] == "finished" and status["exit_code"] == 0, status
    assert status["reason"] is None


@pytest.mark.anyio
async def test_terminal_approval_shows_what_it_approves_and_refuses_what_cannot_run(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    from evalsweep.agent._estimate import plan_work

    async with Client(build_server(store_path)) as client:
        quote = ok(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        quote_id = quote["quote_id"]
        code, shown = approve_in_terminal(store_path, quote_id, b"y")
        assert code == 0, shown
        started = ok(await client.call_tool("start_sweep", {"quote_id": quote_id}))
        await wait_for_end(client, started["job_id"])
        late = ok(await client.call_tool("quote_sweep", sweep_args(gpt2_a, limit=3)))
    (identity,) = plan_work(
        [str(gpt2_a)], [TASK], data_dir=os.environ["EVALSWEEP_DATA_DIR"], limit=2,
        num_fewshot=None, device="auto",
    ).identities  # fmt: skip
    assert f"{gpt2_a} -> {identity['identity']}" in shown
    assert "$36.00/h" in shown and "worst case $" in shown
    assert (
        "$50.00 per connection, $100.00 global" in shown and "left for this connection $" in shown
    )

    # Used, expired, unknown: refused before any question, and audited.
    with sqlite3.connect(store_path) as conn:
        conn.execute(
            "UPDATE agent_quotes SET expires = ? WHERE quote_id = ?",
            (time.time() - 1, late["quote_id"]),
        )
    for asked, says in (
        (quote_id, "already used"), (late["quote_id"], "expired"), ("q-0000000000", "no quote"),
    ):  # fmt: skip
        code, output = approve_in_terminal(store_path, asked, b"y")
        assert code != 0 and says in output and "[y/N]" not in output, output
    piped = subprocess.run(
        [sys.executable, "-m", "evalsweep", "approve", quote_id, "--store", str(store_path)],
        input="y\n", capture_output=True, text=True,
    )  # fmt: skip
    assert piped.returncode != 0 and "needs a terminal" in piped.stderr
    with Store(store_path) as store:
        refusals = [e["text"] for e in store.audit_entries(kind="refusal")]
    assert sum("approve:" in t for t in refusals) == 4, refusals


class FailingBox(RentedBox):
    def deploy(self, *, dryrun: bool = False) -> dict[str, Any]:
        raise TargetError("box: no capacity in zone test-1a (try another zone)")


@pytest.mark.anyio
async def test_a_failed_action_keeps_its_error_text_and_its_reservation_is_released(
    agent_env: Path, store_path: Path
) -> None:
    config = {"limits": {"per_connection_usd": 10.0, "global_usd": 10.0}}
    server = build_server(store_path, config=config, targets={"box": FailingBox()})
    async with Client(server) as client:
        quote = ok(await client.call_tool("quote_action", {"target": "box", "action": "deploy"}))
        assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        failed = await client.call_tool("deploy", {"quote_id": quote["quote_id"]})
        spend = ok(await client.call_tool("spend", {}))
    assert failed.is_error
    assert failed.content[0].text == "deploy: box: no capacity in zone test-1a (try another zone)"
    with Store(store_path) as store:
        (entry,) = store.audit_entries(kind="lifecycle")
    assert entry["text"] == "deploy box failed: box: no capacity in zone test-1a (try another zone)"
    assert spend["connection_reserved_usd"] == 0 and spend["running_usd_per_hour"] == 0


@pytest.mark.anyio
async def test_refusals_carry_one_prefix(agent_env: Path, store_path: Path, gpt2_a: Path) -> None:
    async with Client(build_server(store_path, config={"approval": {"quote_ttl_s": 0.0}})) as c:
        quote = ok(await c.call_tool("quote_sweep", sweep_args(gpt2_a)))
        text = (await c.call_tool("start_sweep", {"quote_id": quote["quote_id"]})).content[0].text
    assert text.startswith("start_sweep: quote ") and text.count("start_sweep:") == 1, text

"""Background jobs: cancelling stops the whole process group; a vanished job is 'lost'."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from evalsweep.agent import build_server
from evalsweep.store import Store

TASK = "mmlu_abstract_algebra"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def agent_env(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(tmp_path / "config" / "config.toml"))
    monkeypatch.setenv("EVALSWEEP_DATA_DIR", str(data_dir))


def ok(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content[0].text
    return dict(call.structured_content)


def group_alive(pgid: int) -> bool:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(stat.parent.name)
    return bool(members)


async def start_job(client: Client, checkpoint: Path) -> str:
    args = {"checkpoints": [str(checkpoint)], "tasks": [TASK], "limit": 50}
    quote = ok(await client.call_tool("quote_sweep", args))
    return str(ok(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))["job_id"])


def job_pid(store_path: Path, job_id: str) -> int:
    with sqlite3.connect(store_path) as conn:
        return int(
            conn.execute("SELECT pid FROM agent_jobs WHERE job_id = ?", (job_id,)).fetchone()[0]
        )


@pytest.mark.anyio
async def test_cancel_stops_the_process_group_and_billing(
    agent_env: None, store_path: Path, gpt2_a: Path
) -> None:
    async with Client(build_server(store_path, config={})) as client:
        job_id = await start_job(client, gpt2_a)
        pid = job_pid(store_path, job_id)
        assert group_alive(pid)
        cancelled = ok(await client.call_tool("cancel_job", {"job_id": job_id}))
        assert cancelled == {"job_id": job_id, "stopped": True, "status": "cancelled"}
        with anyio.fail_after(60):
            while group_alive(pid):
                await anyio.sleep(0.2)
        status = ok(await client.call_tool("job_status", {"job_id": job_id}))
        again = ok(await client.call_tool("cancel_job", {"job_id": job_id}))
    assert status["status"] == "cancelled" and status["ended"] is not None
    assert again["stopped"] is False
    with Store(store_path) as store:
        stops = store.audit_entries(kind="stop")
        (command,) = store.audit_entries(kind="command")
    assert [s["text"] for s in stops] == [f"stop job {job_id}: cancelled"]
    assert command["ended"] is not None  # the supervisor recorded the end


@pytest.mark.anyio
async def test_job_whose_processes_vanished_is_lost_not_running(
    agent_env: None, store_path: Path, gpt2_a: Path
) -> None:
    async with Client(build_server(store_path, config={})) as client:
        job_id = await start_job(client, gpt2_a)
    pid = job_pid(store_path, job_id)
    os.killpg(pid, signal.SIGKILL)  # e.g. the machine rebooted: nobody recorded the end
    with anyio.fail_after(60):
        while group_alive(pid):
            await anyio.sleep(0.2)
    async with Client(build_server(store_path, config={})) as client:
        status = ok(await client.call_tool("job_status", {"job_id": job_id}))
        listed = ok(await client.call_tool("list_jobs", {}))["jobs"]
    assert status["status"] == "lost" and "disappeared" in status["reason"]
    assert [j["job_id"] for j in listed] == [job_id]

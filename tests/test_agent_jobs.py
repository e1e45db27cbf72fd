"""Background jobs: cancelling stops the whole process group; a vanished job is 'lost';
a job for a configured target runs ``evalsweep run --target NAME`` there."""

from __future__ import annotations

import os
import shlex
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from evalsweep.agent import approve_quote, build_server
from evalsweep.store import Store
from test_compute_ssh import Sshd, _config, sshd  # noqa: F401 - the loopback sshd fixture

TASK = "mmlu_abstract_algebra"


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


@pytest.mark.slow
@pytest.mark.anyio
async def test_job_for_a_configured_ssh_target_runs_there_at_the_quoted_rate(
    store_path: Path, tmp_path: Path, gpt2_a: Path, data_dir: Path, sshd: Sshd,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    config = _config(tmp_path / "config.toml", sshd, tmp_path / "remote")  # [targets.box], 2.5/h
    with config.open("a") as handle:
        handle.write("[limits]\nper_connection_usd = 5.0\nglobal_usd = 5.0\n")
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(config))
    monkeypatch.setenv("EVALSWEEP_DATA_DIR", str(data_dir))
    monkeypatch.setenv("EVALSWEEP_TARGET", "local")  # the job must not follow this
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 1, "target": "box"}
    async with Client(build_server(store_path)) as client:
        quote = ok(await client.call_tool("quote_sweep", args))
        assert quote["hourly_rate"] == 2.5 and quote["hardware"] == "loopback"
        assert quote["needs_approval"]
        with Store(store_path) as store:
            approve_quote(store, quote["quote_id"], "the person, in a test")
        started = ok(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        job_id = started["job_id"]
        with anyio.fail_after(300):
            while (status := ok(await client.call_tool("job_status", {"job_id": job_id})))[
                "status"
            ] == "running":
                await anyio.sleep(0.5)
        table = ok(await client.call_tool("results_table", {"job_id": job_id}))
    assert status["status"] == "finished", status
    assert status["hourly_rate"] == 2.5
    assert [r["checkpoint"] for r in table["results"]] == [str(gpt2_a)]
    with Store(store_path) as store:
        (job,) = [e for e in store.audit_entries(target="box") if e["detail"].get("job") == job_id]
        sent = [e for e in store.audit_entries(target="box") if e["text"].startswith("ssh ")]
    argv = shlex.split(job["text"])
    assert argv[argv.index("--target") + 1] == "box" and job["exit_code"] == 0
    assert argv[1:4] == ["-m", "evalsweep", "run"]
    # The job's own evalsweep run sent its commands over ssh, audited in the same store.
    assert sent and all(e["exit_code"] == 0 for e in sent)

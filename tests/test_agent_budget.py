"""Spend limits as reservations, held by the jobs' supervisors with nobody else left.

Paid jobs are started concurrently from two real stdio MCP clients (two
connections) against real ``evalsweep mcp`` servers; then every client and
every server is killed with SIGKILL. The jobs' own supervisors must stop each
one inside what it reserved, so that the spend of each connection and of all
of them stays within the limits (a second of billing is the tolerance).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evalsweep.agent._ledger import committed, spent
from evalsweep.store import Store

TASK = "mmlu_abstract_algebra"
RATE = 360.0  # USD per hour: $0.10 a second
PER_CONNECTION = 0.5
GLOBAL = 0.8
JOB_SECONDS = 3.0  # max_job_hours, so that several jobs can run side by side

CLIENT = textwrap.dedent(
    """
    import json, os, sys, anyio
    from mcp import Client, StdioServerParameters
    from mcp.types import ElicitResult

    store, go, TASK, *checkpoints = sys.argv[1:]

    async def accept(context, params):
        return ElicitResult(action="accept", content={"approve": True})

    async def main():
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "evalsweep", "mcp", "--store", store],
            env=dict(os.environ),
        )
        async with Client(params, read_timeout_seconds=120, elicitation_callback=accept) as c:
            quotes = []
            for checkpoint in checkpoints:
                args = {"checkpoints": [checkpoint], "tasks": [TASK], "limit": 50}
                quotes.append((await c.call_tool("quote_sweep", args)).structured_content)
            outcomes = []
            print("ready", flush=True)
            while not os.path.exists(go):  # both clients start at the same moment
                await anyio.sleep(0.01)

            async def start(quote):
                call = await c.call_tool("start_sweep", {"quote_id": quote["quote_id"]})
                outcomes.append(call.content[0].text if call.is_error else call.structured_content)

            async with anyio.create_task_group() as group:
                for quote in quotes:
                    group.start_soon(start, quote)
            spend = (await c.call_tool("spend", {})).structured_content
            print(json.dumps({"quotes": quotes, "outcomes": outcomes, "spend": spend}), flush=True)
            await anyio.sleep(3600)

    anyio.run(main)
    """
)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_concurrent_paid_jobs_stop_inside_the_limits_after_client_and_server_are_killed(
    tmp_path: Path, store_path: Path, data_dir: Path, gpt2_a: Path, gpt2_b: Path,
    cli_env: dict[str, str],
) -> None:  # fmt: skip
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        f"[rates]\nlocal = {RATE}\n"
        f"[limits]\nper_connection_usd = {PER_CONNECTION}\nglobal_usd = {GLOBAL}\n"
        f"max_job_hours = {JOB_SECONDS / 3600}\n"
        "[throughput]\nstartup_s = 0\nper_checkpoint_s = 0\ncpu = 1e12\ncuda = 1e12\n"
    )
    env = {**cli_env, "EVALSWEEP_CONFIG": str(config), "EVALSWEEP_DATA_DIR": str(data_dir)}
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    go = tmp_path / "go"
    # Created first: two servers creating one new store at once is another matter.
    with Store(store_path):
        pass
    errors = (tmp_path / "client.err").open("a")  # noqa: SIM115 - the clients keep it
    clients = [
        subprocess.Popen(
            [sys.executable, str(script), str(store_path), str(go), TASK, str(gpt2_a), str(gpt2_b)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    reports = []
    try:
        for client in clients:
            assert client.stdout is not None
            assert client.stdout.readline() == "ready\n", "the client could not quote"
        go.touch()
        for client in clients:
            assert client.stdout is not None
            line = client.stdout.readline()
            assert line, "the client ended without a report"
            reports.append(json.loads(line))
    finally:
        for client in clients:  # the client and its server die; the jobs' supervisors do not
            for pid in [*_children(client.pid), client.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            client.wait()
    started = [o for r in reports for o in r["outcomes"] if isinstance(o, dict)]
    refused = [o for r in reports for o in r["outcomes"] if isinstance(o, str)]
    # Four starts of $0.30 at most against $0.50 a connection and $0.80 in all, together:
    # three fit (e.g. 0.3 + 0.2 on one connection, 0.3 on the other); a fourth is refused,
    # or starts on what an ended job did not spend.
    assert len(started) >= 3, reports
    assert all("the spend limits leave" in text for text in refused)
    for report in reports:  # every quote showed what it would reserve at most
        assert all(0 < q["max_cost"] <= RATE * JOB_SECONDS / 3600 + 1e-9 for q in report["quotes"])

    deadline = time.time() + 180
    while True:
        with sqlite3.connect(store_path) as conn:
            running = conn.execute(
                "SELECT COUNT(*) FROM agent_jobs WHERE status = 'running'"
            ).fetchone()[0]
        if running == 0:
            break
        assert time.time() < deadline, "jobs still running with no server"
        time.sleep(0.5)
    tolerance = RATE / 3600  # one second of billing
    with Store(store_path) as store:
        rows = store.connection.execute(
            "SELECT j.job_id, j.connection, j.status, l.started, l.ended, l.reserved, l.deadline "
            "FROM agent_jobs j JOIN agent_ledger l ON l.item = j.job_id"
        ).fetchall()
        connections = {r[1] for r in rows}
        by_connection = {c: spent(store, connection=c) for c in connections}
        total = spent(store)
        assert committed(store) == pytest.approx(total)  # nothing reserved is left open
        stops = store.audit_entries(kind="stop")
    measured = {
        "per_connection": by_connection, "global": total,
        "jobs": [(r[2], round((r[4] - r[3]) * RATE / 3600, 4), round(r[5], 4)) for r in rows],
    }  # fmt: skip
    print("measured spend:", json.dumps(measured))
    assert len(connections) == 2
    for job_id, _, status, began, ended, reserved, job_deadline in rows:
        assert status in ("stopped", "finished"), (job_id, status)
        assert ended <= job_deadline + 1.0, (job_id, ended - job_deadline)
        assert (ended - began) * RATE / 3600 <= reserved + tolerance
    assert all(value <= PER_CONNECTION + tolerance for value in by_connection.values()), measured
    assert total <= GLOBAL + tolerance, measured
    stopped = [r[0] for r in rows if r[2] == "stopped"]
    assert {s["detail"]["job"] for s in stops} == set(stopped)

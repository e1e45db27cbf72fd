"""The approval gate, the spend limits and the lifecycle actions, through a real MCP client.

The server runs in-process with the SDK's in-memory client session; jobs are
real detached ``evalsweep run`` processes on tiny checkpoints, approvals are
given by a real ``evalsweep approve`` in a pseudo-terminal, and everything is
checked against the real results store and its audit log.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import shlex
import shutil
import sqlite3
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import ElicitResult

from evalsweep.agent import AgentSettings, build_server
from evalsweep.compute import (
    CommandRunner,
    LifecycleTarget,
    LocalTarget,
    SweepJob,
    TargetInfo,
    TargetRun,
)
from evalsweep.engine import Progress
from evalsweep.store import Store

TASK = "mmlu_abstract_algebra"
PRICED = {"rates": {"local": 36.0}, "limits": {"per_connection_usd": 50.0, "global_usd": 100.0}}


def result(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content[0].text
    return dict(call.structured_content)


def error_text(call: Any) -> str:
    assert call.is_error, call.structured_content
    return str(call.content[0].text)


def audit_texts(store_path: Path, kind: str) -> list[str]:
    with Store(store_path) as store:
        return [e["text"] for e in store.audit_entries(kind=kind)]


def approve_in_terminal(
    store_path: Path, quote_id: str, answer: bytes = b"y", columns: int | None = None
) -> tuple[int, str]:
    """Run ``evalsweep approve`` as the person would: a real process on a real (pseudo) tty.

    The answer is typed only once the whole prompt is on the screen: click writes the
    question and then asks for the line with ``input(" ")``, so an answer typed at the
    first sight of ``[y/N]:`` would be echoed before that last space.
    """
    env = {**os.environ, "COLUMNS": str(columns or 200)}
    argv = [sys.executable, "-m", "evalsweep", "approve", quote_id, "--store", str(store_path)]
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvpe(argv[0], argv, env)
    if columns is not None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    output = b""
    answered = False
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
        if not answered and b"Approve" in output and output.endswith(b"[y/N]: "):
            os.write(fd, answer + b"\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


async def wait_for_end(client: Client, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            status = result(await client.call_tool("job_status", {"job_id": job_id}))
            if status["status"] != "running":
                return status
            await anyio.sleep(0.25)


def sweep_args(*checkpoints: Path, limit: int = 2) -> dict[str, Any]:
    return {"checkpoints": [str(c) for c in checkpoints], "tasks": [TASK], "limit": limit}


@pytest.mark.anyio
async def test_start_without_a_quote_is_refused(agent_env: Path, store_path: Path) -> None:
    async with Client(build_server(store_path, config={})) as client:
        text = error_text(await client.call_tool("start_sweep", {"quote_id": "q-0123456789"}))
        made_up = error_text(await client.call_tool("start_sweep", {"quote_id": "q-made-up"}))
    assert "no quote 'q-0123456789'" in text
    assert made_up == "start_sweep: quote_id is not a quote id (as returned by evalsweep)"
    refusals = audit_texts(store_path, "refusal")
    assert any("q-0123456789" in t for t in refusals) and len(refusals) == 2


@pytest.mark.anyio
async def test_reused_quote_is_refused(agent_env: Path, store_path: Path, gpt2_a: Path) -> None:
    async with Client(build_server(store_path, config={})) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        assert quote["needs_approval"] is False and quote["estimated_cost"] == 0
        started = result(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        again = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        await client.call_tool("cancel_job", {"job_id": started["job_id"]})
    assert "already used by start_sweep" in again
    refusals = audit_texts(store_path, "refusal")
    assert any(quote["quote_id"] in t and "already used" in t for t in refusals)


@pytest.mark.anyio
async def test_changed_quote_parameter_is_refused(
    agent_env: Path, store_path: Path, gpt2_a: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(gpt2_a, copy)
    async with Client(build_server(store_path, config={})) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(copy)))
        restated = {"quote_id": quote["quote_id"], "limit": 3}
        text = error_text(await client.call_tool("start_sweep", restated))
        assert "limit differs from quote" in text
        # The checkpoint itself changes after the quote: same name, other bytes.
        config = copy / "config.json"
        config.write_text(config.read_text().replace("}", ', "evalsweep_edit": 1}', 1))
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
    assert "does not cover these parameters" in text
    with sqlite3.connect(store_path) as conn:
        used = conn.execute(
            "SELECT used FROM agent_quotes WHERE quote_id = ?", (quote["quote_id"],)
        ).fetchone()[0]
        jobs = conn.execute("SELECT COUNT(*) FROM agent_jobs").fetchone()[0]
    assert used is None and jobs == 0


@pytest.mark.anyio
async def test_expired_quote_is_refused(agent_env: Path, store_path: Path, gpt2_a: Path) -> None:
    config = {"approval": {"quote_ttl_s": 0.0}}
    async with Client(build_server(store_path, config=config)) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
    assert "expired" in text
    assert any("expired" in t for t in audit_texts(store_path, "refusal"))


@pytest.mark.anyio
async def test_terminal_approval_prints_the_id_as_written(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    """An id of digits alone must not come back coloured (it did, one time in a hundred)."""
    async with Client(build_server(store_path, config=PRICED)) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
    digits = "q-1234567890"
    with sqlite3.connect(store_path) as conn:
        conn.execute(
            "UPDATE agent_quotes SET quote_id = ? WHERE quote_id = ?", (digits, quote["quote_id"])
        )
    code, output = approve_in_terminal(store_path, digits, b"y")
    assert code == 0 and f"approved {digits}\r\n" in output, output
    assert "\x1b[" not in output.split("approved", 1)[1]


@pytest.mark.anyio
async def test_paid_work_needs_approval_from_the_terminal(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    async with Client(build_server(store_path, config=PRICED)) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        quote_id = quote["quote_id"]
        assert quote["needs_approval"] and quote["hourly_rate"] == 36.0
        # The worst case is what starting it would reserve: the $50 the limit leaves.
        assert quote["estimated_cost"] > 0 and quote["max_cost"] == 50.0
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote_id}))
        assert f"evalsweep approve {quote_id}" in text
        # The approval parameter is filled by the server, never by the caller.
        forged = {"quote_id": quote_id, "consent": {"approve": True}}
        forged_call = await client.call_tool("start_sweep", forged)
        assert forged_call.is_error and "unknown argument 'consent'" in error_text(forged_call)
        again = error_text(await client.call_tool("start_sweep", {"quote_id": quote_id}))
        assert f"evalsweep approve {quote_id}" in again  # still not approved

        # A pipe is not the person: approving without a terminal is refused.
        piped = subprocess.run(
            [sys.executable, "-m", "evalsweep", "approve", quote_id, "--store", str(store_path)],
            input="y\n", capture_output=True, text=True, env=os.environ,
        )  # fmt: skip
        assert piped.returncode != 0 and "needs a terminal" in piped.stderr
        # The person says no, then yes.
        code, output = approve_in_terminal(store_path, quote_id, b"n")
        assert code == 1 and "not approved" in output
        assert error_text(await client.call_tool("start_sweep", {"quote_id": quote_id}))
        code, output = approve_in_terminal(store_path, quote_id, b"y")
        assert code == 0 and f"approved {quote_id}" in output, output

        started = result(await client.call_tool("start_sweep", {"quote_id": quote_id}))
        assert "in a terminal" in started["approved_by"]
        status = await wait_for_end(client, started["job_id"])
    assert status["status"] == "finished", status
    assert status["spend_usd"] > 0 and status["documents_done"] == status["documents_total"] == 2
    approvals = audit_texts(store_path, "approval")
    assert len(approvals) == 1 and quote_id in approvals[0]
    commands = audit_texts(store_path, "command")
    assert any(" -m evalsweep run " in c and "--limit 2" in c for c in commands)


@pytest.mark.anyio
async def test_elicitation_answer_approves_when_trusted_and_declines_refuse(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    questions: list[str] = []

    def answering(action: str) -> Any:
        async def callback(context: Any, params: Any) -> ElicitResult:
            questions.append(params.message)
            return ElicitResult(action=action, content={"approve": True})

        return callback

    server = build_server(store_path, config=PRICED)
    async with Client(server, elicitation_callback=answering("decline")) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        assert "declined by the person" in text
    async with Client(server, elicitation_callback=answering("accept")) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        started = result(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        assert started["approved_by"] == "the person, through the MCP client"
        await client.call_tool("cancel_job", {"job_id": started["job_id"]})
    assert len(questions) == 2 and "$36.00/h" in questions[1]

    untrusting = {**PRICED, "approval": {"elicitation": False}}
    server = build_server(store_path, config=untrusting)
    async with Client(server, elicitation_callback=answering("accept")) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
    assert "evalsweep approve" in text and len(questions) == 2


@pytest.mark.anyio
async def test_paid_work_without_configured_limits_is_refused(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    async with Client(build_server(store_path, config={"rates": {"local": 1.0}})) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
    assert "needs spend limits" in text


@pytest.mark.anyio
async def test_second_job_refused_when_estimates_cross_the_limit(
    agent_env: Path, store_path: Path, gpt2_a: Path, gpt2_b: Path
) -> None:
    # Each sweep is estimated at about half an hour of $36/h start-up: ~$0.30.
    config = {
        "rates": {"local": 36.0},
        "limits": {"per_connection_usd": 0.5, "global_usd": 10.0},
        "throughput": {"startup_s": 30.0, "per_checkpoint_s": 0.0},
    }
    async with Client(build_server(store_path, config=config)) as client:
        first = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a)))
        second = result(await client.call_tool("quote_sweep", sweep_args(gpt2_b)))
        for quote in (first, second):
            assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        job = result(await client.call_tool("start_sweep", {"quote_id": first["quote_id"]}))
        text = error_text(await client.call_tool("start_sweep", {"quote_id": second["quote_id"]}))
        await client.call_tool("cancel_job", {"job_id": job["job_id"]})
    # The first reserved all that the $0.50 left (its worst case); the second does not fit.
    assert "the spend limits leave $0.0000 and this work is estimated at $0.3" in text


@pytest.mark.anyio
async def test_concurrent_jobs_share_the_limit_by_reservation(
    agent_env: Path, store_path: Path, gpt2_a: Path, gpt2_b: Path
) -> None:
    # $1 a second, $3 per connection, at most 2 s a job: the first reserves $2, the second
    # what is left ($1); both are stopped at their deadlines by their supervisors.
    limit = 3.0
    config = {
        "rates": {"local": 3600.0},
        "limits": {
            "per_connection_usd": limit,
            "global_usd": 100.0,
            "watchdog_interval_s": 0.2,
            "max_job_hours": 2 / 3600,
        },
        "throughput": {"startup_s": 0.0, "per_checkpoint_s": 0.0, "cpu": 1e12, "cuda": 1e12},
    }
    async with Client(build_server(store_path, config=config)) as client:
        quotes = [
            result(await client.call_tool("quote_sweep", sweep_args(c, limit=50)))
            for c in (gpt2_a, gpt2_b)
        ]
        for quote in quotes:
            assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        started = [
            result(await client.call_tool("start_sweep", {"quote_id": q["quote_id"]}))
            for q in quotes
        ]
        during = result(await client.call_tool("spend", {}))
        ended = [await wait_for_end(client, s["job_id"], timeout=60) for s in started]
        spent = result(await client.call_tool("spend", {}))
    assert [s["reserved_usd"] for s in started] == [
        pytest.approx(2.0),
        pytest.approx(1.0, abs=0.02),
    ]
    assert during["connection_spent_usd"] + during["connection_reserved_usd"] == pytest.approx(
        limit, abs=0.02
    )
    assert during["left_usd"] == pytest.approx(0.0, abs=0.02)
    assert [e["status"] for e in ended] == ["stopped", "stopped"]
    assert all("deadline" in e["reason"] for e in ended), ended
    assert all(e["spend_usd"] <= e["reserved_usd"] + 1.0 for e in ended), ended
    assert spent["connection_spent_usd"] <= limit + 1.0  # a second of billing
    assert spent["connection_reserved_usd"] == 0
    assert spent["connection_spent_usd"] == pytest.approx(sum(e["spend_usd"] for e in ended))
    with sqlite3.connect(store_path) as conn:
        pids = [r[0] for r in conn.execute("SELECT pid FROM agent_jobs")]
    await anyio.sleep(0.5)
    for pid in pids:
        alive = Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)
        assert not alive, f"job process {pid} still running"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.anyio
async def test_no_tool_can_raise_a_limit_or_write_the_config(
    agent_env: Path, store_path: Path
) -> None:
    agent_env.write_text("[limits]\nper_connection_usd = 1.0\nglobal_usd = 2.0\n")
    before = hashlib.sha256(agent_env.read_bytes()).hexdigest()
    async with Client(build_server(store_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {
            "list_tasks", "list_targets", "quote_sweep", "start_sweep", "job_status",
            "list_jobs", "job_logs", "cancel_job", "results_table", "compare", "spend",
            "list_secrets", "quote_action", "deploy", "stop", "start", "terminate",
            "run_trend",
        }  # fmt: skip
        for tool in tools.values():
            properties = set((tool.input_schema or {}).get("properties", {}))
            assert not properties & {"per_connection_usd", "global_usd", "limits", "config"}
        attempt = await client.call_tool(
            "spend", {"per_connection_usd": 1000.0, "limits": {"global_usd": 1e6}}
        )
        after = result(await client.call_tool("spend", {}))
    assert attempt.is_error or attempt.structured_content["limits"]["per_connection_usd"] == 1.0
    assert after["limits"]["per_connection_usd"] == 1.0 and after["limits"]["global_usd"] == 2.0
    assert hashlib.sha256(agent_env.read_bytes()).hexdigest() == before


class RentedBox:
    """A real lifecycle target: each action runs a real local command through its runner."""

    name = "box"

    def __init__(self) -> None:
        self.store: Store | None = None
        self.actions: list[str] = []
        self.stores: list[Store] = []

    def info(self) -> TargetInfo:
        return TargetInfo("box", "test-box", "1 x test GPU", hourly_rate=7.2, lifecycle=True)

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        return LocalTarget().run(job, store, progress)

    def _act(self, action: str) -> None:
        assert self.store is not None, "the server gives the target its store"
        done = CommandRunner(self.store, self.name).run(
            [sys.executable, "-c", f"print('box {action} ok')"]
        )
        assert done.stdout == f"box {action} ok\n".encode()
        self.actions.append(action)
        self.stores.append(self.store)

    def deploy(self, *, dryrun: bool = False) -> dict[str, Any]:
        self._act("deploy")
        return {"machine": "box-1", "dryrun": dryrun}

    def stop(self) -> None:
        self._act("stop")

    def start(self) -> None:
        self._act("start")

    def terminate(self) -> None:
        self._act("terminate")


@pytest.mark.anyio
async def test_lifecycle_actions_need_an_approved_quote_for_that_action(
    agent_env: Path, store_path: Path
) -> None:
    box = RentedBox()
    assert isinstance(box, LifecycleTarget)
    config = {"limits": {"per_connection_usd": 10.0, "global_usd": 10.0}}
    server = build_server(store_path, config=config, targets={"box": box})
    async with Client(server) as client:
        targets = result(await client.call_tool("list_targets", {}))["targets"]
        assert {t["name"]: t["lifecycle"] for t in targets} == {"box": True, "local": False}
        local_deploy = {"target": "local", "action": "deploy"}
        assert "no lifecycle" in error_text(await client.call_tool("quote_action", local_deploy))
        quote = result(
            await client.call_tool("quote_action", {"target": "box", "action": "deploy"})
        )
        assert quote["needs_approval"] and quote["hourly_rate"] == 7.2
        assert "billing starts at $7.20/h" in quote["summary"]
        text = error_text(await client.call_tool("deploy", {"quote_id": quote["quote_id"]}))
        assert "evalsweep approve" in text and box.actions == []
        assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        # An approved deploy quote does not terminate.
        text = error_text(await client.call_tool("terminate", {"quote_id": quote["quote_id"]}))
        assert "does not cover these parameters" in text and box.actions == []
        done = result(await client.call_tool("deploy", {"quote_id": quote["quote_id"]}))
        assert done["result"] == "deployed box (1 x test GPU), machine box-1"
        assert box.actions == ["deploy"]
        again = error_text(await client.call_tool("deploy", {"quote_id": quote["quote_id"]}))
        assert "already used" in again
        running = result(await client.call_tool("spend", {}))["running_usd_per_hour"]
        assert running == 7.2
        box_stop = {"target": "box", "action": "stop"}
        stop_quote = result(await client.call_tool("quote_action", box_stop))
        assert approve_in_terminal(store_path, stop_quote["quote_id"])[0] == 0
        stopped = result(await client.call_tool("stop", {"quote_id": stop_quote["quote_id"]}))
        assert stopped["result"] == "stopped box"
        assert result(await client.call_tool("spend", {}))["running_usd_per_hour"] == 0
    assert box.actions == ["deploy", "stop"]
    # Each action ran on a store connection of its own thread, given back afterwards.
    assert all(s.path == store_path.resolve() for s in box.stores) and box.store is not None
    assert box.store not in box.stores
    with Store(store_path) as store:
        commands = store.audit_entries(kind="command", target="box")
    assert [c["exit_code"] for c in commands] == [0, 0]
    assert commands[0]["text"] == shlex.join([sys.executable, "-c", "print('box deploy ok')"])
    assert commands[0]["output_bytes"] == len(b"box deploy ok\n")
    assert len(audit_texts(store_path, "lifecycle")) == 2


@pytest.mark.anyio
async def test_configured_cloud_target_offers_compute_lifecycle_at_its_catalog_price(
    agent_env: Path, store_path: Path
) -> None:
    from evalsweep.compute import quote

    config = {"targets": {"cloud": {"kind": "skypilot", "gpu": "H100", "cluster": "c1"}}}
    server = build_server(store_path, config=config)
    async with Client(server) as client:
        targets = result(await client.call_tool("list_targets", {}))["targets"]
        ask = {"target": "cloud", "action": "terminate"}
        priced = result(await client.call_tool("quote_action", ask))
    rows = {t["name"]: t for t in targets}
    offer = quote("H100", 1)
    assert rows["cloud"]["lifecycle"] and rows["cloud"]["kind"] == "skypilot"
    assert rows["cloud"]["hourly_rate"] == offer.hourly_price > 0
    assert priced["needs_approval"] and priced["hourly_rate"] == offer.hourly_price
    assert "destroyed" in priced["summary"]


@pytest.mark.anyio
async def test_results_are_capped_and_logs_page_within_the_cap(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    assert AgentSettings.from_config({"limits": {"max_result_bytes": 5e6}}).max_result_bytes == (
        1_000_000
    )
    async with Client(build_server(store_path, config={"limits": {"max_result_bytes": 1000}})) as c:
        text = error_text(await c.call_tool("quote_sweep", sweep_args(gpt2_a)))
        assert "exceeds the 1000-byte cap" in text
    async with Client(build_server(store_path, config={"limits": {"max_result_bytes": 4000}})) as c:
        quote = result(await c.call_tool("quote_sweep", sweep_args(gpt2_a)))
        job = result(await c.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))["job_id"]
        assert (await wait_for_end(c, job))["status"] == "finished"
        call = await c.call_tool("job_logs", {"job_id": job, "max_bytes": 10**6})
        assert len(call.model_dump_json(by_alias=True, exclude_none=True).encode()) <= 4000
        page = result(call)
        assert 0 < len(page["text"].encode()) <= 4000 and not page["eof"]
        log = (store_path.parent / "evalsweep-jobs" / job / "log.txt").read_bytes()
        assert page["text"].encode() == log[: page["next_offset"]]
        beyond = {"job_id": job, "offset": len(log) + 1}
        assert "outside the log" in error_text(await c.call_tool("job_logs", beyond))


@pytest.mark.anyio
async def test_budget_deadline_holds_after_the_server_is_gone(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    # $0.50 a second and $2 to spend: the job's own supervisor stops it after 4 s.
    config = {
        "rates": {"local": 1800.0},
        "limits": {"per_connection_usd": 2.0, "global_usd": 2.0},
        "throughput": {"startup_s": 0.0, "per_checkpoint_s": 0.0, "cpu": 1e12, "cuda": 1e12},
    }
    async with Client(build_server(store_path, config=config)) as client:
        quote = result(await client.call_tool("quote_sweep", sweep_args(gpt2_a, limit=50)))
        assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        job = result(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
    # No server (and so no watchdog) from here on.
    with anyio.fail_after(120):
        while True:
            with sqlite3.connect(store_path) as conn:
                status, reason, started, ended = conn.execute(
                    "SELECT status, reason, started, ended FROM agent_jobs WHERE job_id = ?",
                    (job["job_id"],),
                ).fetchone()
            if status != "running":
                break
            await anyio.sleep(0.25)
    assert status == "stopped" and reason.startswith("deadline reached"), (status, reason)
    log = (store_path.parent / "evalsweep-jobs" / job["job_id"] / "log.txt").read_text()
    assert "job stopped at its deadline" in log
    with Store(store_path) as store:
        from evalsweep.agent._ledger import spent

        total = spent(store)
    assert total == pytest.approx((ended - started) * 0.5, rel=1e-2)
    # Billing runs from the start request to the process's real end, so it overshoots the
    # budget by the seconds a loaded machine takes to start the supervisor and stop the job.
    assert total < 2.0 + 0.5 * 5

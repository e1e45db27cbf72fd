"""``evalsweep mcp`` as a chat agent sees it: a real client over stdio and over HTTP.

One real small sweep runs end to end through the tools in a server
subprocess; the server is then restarted while the job runs, and the new one
finds the job in the store, follows it to the end and shows the table. A
planted secret (a canary) must appear in no log, result, store or tool output.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

TASK = "mmlu_abstract_algebra"


@pytest.fixture
def server_env(tmp_path: Path, cli_env: dict[str, str], data_dir: Path) -> dict[str, str]:
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir()
    config.write_text("[limits]\nper_connection_usd = 1.0\nglobal_usd = 1.0\n")
    return {**cli_env, "EVALSWEEP_CONFIG": str(config), "EVALSWEEP_DATA_DIR": str(data_dir)}


def payload(call: Any, seen: list[str]) -> dict[str, Any]:
    seen.extend(c.text for c in call.content if hasattr(c, "text"))
    assert not call.is_error, call.content[0].text
    seen.append(json.dumps(call.structured_content))
    return dict(call.structured_content)


@pytest.mark.slow
@pytest.mark.anyio
async def test_stdio_sweep_survives_restart_and_never_shows_the_canary(
    tmp_path: Path, store_path: Path, server_env: dict[str, str], gpt2_a: Path, gpt2_b: Path
) -> None:
    canary = "canary-" + secrets.token_hex(12)
    subprocess.run(
        [sys.executable, "-m", "evalsweep", "secrets", "set", "CANARY_TOKEN"],
        input=canary + "\n", text=True, env=server_env, check=True, capture_output=True,
    )  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "evalsweep", "mcp", "--store", str(store_path)],
        env=server_env,
    )
    seen: list[str] = []
    async with Client(params, read_timeout_seconds=120) as client:
        tasks = payload(await client.call_tool("list_tasks", {}), seen)["tasks"]
        assert {"mmlu", "gsm8k"} <= {t["name"] for t in tasks}
        targets = payload(await client.call_tool("list_targets", {}), seen)["targets"]
        assert [(t["name"], t["hourly_rate"]) for t in targets] == [("local", 0.0)]
        names = payload(await client.call_tool("list_secrets", {}), seen)["names"]
        assert names == ["CANARY_TOKEN"]
        # Something echoes the secret back (here, a reference): the tool output is redacted.
        echoed = await client.call_tool(
            "quote_sweep", {"checkpoints": [f"/nowhere/{canary}"], "tasks": [TASK]}
        )
        # Named, not echoed: an error must not confirm that an argument is a secret.
        assert echoed.is_error and "checkpoints[0]" in echoed.content[0].text
        assert "secret" not in echoed.content[0].text
        seen.append(echoed.content[0].text)
        args = {"checkpoints": [str(gpt2_a), str(gpt2_b)], "tasks": [TASK], "limit": 3}
        quote = payload(await client.call_tool("quote_sweep", args), seen)
        assert quote["requests"] == 2 * 3 * 4 and quote["needs_approval"] is False
        assert [w["documents"] for w in quote["work"]] == [3]
        job = payload(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}), seen)
        first = payload(await client.call_tool("job_status", {"job_id": job["job_id"]}), seen)
        assert first["status"] == "running"
    closed = time.time()  # the first server is gone; the job is not

    async with Client(params, read_timeout_seconds=120) as client:
        with anyio.fail_after(300):
            while True:
                status = payload(
                    await client.call_tool("job_status", {"job_id": job["job_id"]}), seen
                )
                if status["status"] != "running":
                    break
                await anyio.sleep(1)
        assert status["status"] == "finished", status
        assert status["ended"] > closed and status["exit_code"] == 0
        assert status["documents_done"] == status["documents_total"] == 6
        assert status["spend_usd"] == 0.0

        pages, offset = [], 0
        while True:
            page = payload(
                await client.call_tool(
                    "job_logs", {"job_id": job["job_id"], "offset": offset, "max_bytes": 300}
                ),
                seen,
            )
            assert len(page["text"].encode()) <= 300
            pages.append(page["text"])
            offset = page["next_offset"]
            if page["eof"]:
                break
        log_text = "".join(pages)
        assert len(pages) > 1 and "evalsweep: job exited with status 0" in log_text

        table = payload(await client.call_tool("results_table", {"job_id": job["job_id"]}), seen)
        assert "gpt2-a" in table["text"] and "gpt2-b" in table["text"]
        assert table["baseline"] == str(gpt2_a)
        (comparison,) = table["comparisons"]
        assert comparison["candidate"] == str(gpt2_b) and comparison["task"] == TASK
        again = payload(
            await client.call_tool(
                "compare", {"checkpoints": [str(gpt2_a), str(gpt2_b)], "tasks": [TASK]}
            ),
            seen,
        )
        assert again["comparisons"][0]["verdict"] == comparison["verdict"]
        # Quoting the same sweep again: nothing left to compute; a job this short does not
        # count as a measurement of the throughput.
        requote = payload(await client.call_tool("quote_sweep", args), seen)
        assert requote["work_to_do"] == 0 and requote["checkpoint_loads"] == 0
        assert requote["throughput_source"].startswith("rough default")

    audit = subprocess.run(
        [sys.executable, "-m", "evalsweep", "audit", "--store", str(store_path), "--json"],
        env=server_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    entries = json.loads(audit.stdout)
    (command,) = [e for e in entries if e["kind"] == "command"]
    assert " -m evalsweep run " in command["text"] and "--limit 3" in command["text"]
    assert command["exit_code"] == 0 and command["output_bytes"] > 0

    # The canary is nowhere: tool outputs, the store, the job's log and outputs, the audit.
    assert seen and not [text for text in seen if canary in text]
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "secrets.json"]
    assert any(p.name == "log.txt" for p in files) and any(p.name == "results.json" for p in files)
    leaks = [str(p) for p in files if canary.encode() in p.read_bytes()]
    assert leaks == [] and canary not in audit.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.anyio
async def test_streamable_http_on_loopback_lists_tools(
    store_path: Path, server_env: dict[str, str]
) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "evalsweep", "mcp", "--http", "--port", str(port),
         "--store", str(store_path)],
        env=server_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        with anyio.fail_after(120):
            while True:
                assert server.poll() is None, server.stderr.read().decode()  # type: ignore[union-attr]
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    await anyio.sleep(0.5)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            spend = await client.call_tool("spend", {})
        assert {"quote_sweep", "start_sweep", "job_status", "job_logs"} <= tools
        assert spend.structured_content["limits"]["per_connection_usd"] == 1.0
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_http_refuses_to_listen_beyond_loopback(
    store_path: Path, server_env: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "evalsweep", "mcp", "--http", "--host", "0.0.0.0",
         "--store", str(store_path)],
        env=server_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "only listens on loopback" in done.stderr
    assert "Traceback" not in done.stderr

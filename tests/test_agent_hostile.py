"""What an agent (or an adversary behind it) sends, and what it gets back.

Quotes price exactly the job that will run; references and task names are
checked before quoting and go to the job after ``--``; errors are one line,
one prefix, name arguments instead of echoing them (so no error confirms a
guessed secret) and fit the cap; every tool input is described. Real MCP
client sessions against the real server, the real results store and the
real ``evalsweep run`` argument parser.
"""

from __future__ import annotations

import secrets
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from evalsweep.agent import build_server
from evalsweep.agent._jobs import job_command
from evalsweep.secrets import SecretBox

TASK = "mmlu_abstract_algebra"


def ok(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content[0].text
    return dict(call.structured_content)


def error(call: Any) -> str:
    assert call.is_error, call.structured_content
    (block,) = call.content
    return str(block.text)


def quotes_in(store_path: Path) -> int:
    with sqlite3.connect(store_path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM agent_quotes").fetchone()[0])


GPU_TARGET = {
    "targets": {
        "gpu1": {
            "kind": "ssh",
            "host": "gpu1.invalid",
            "hardware": "1 x H100 80GB",
            "hourly_rate": 3.0,
        }
    },
    "limits": {"per_connection_usd": 100.0, "global_usd": 100.0},
    "throughput": {"cpu": 50.0, "cuda": 50_000.0},
}


@pytest.mark.anyio
async def test_a_quote_prices_the_targets_hardware_and_a_gpu_string_cannot_change_it(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 5, "target": "gpu1"}
    async with Client(build_server(store_path, config=GPU_TARGET)) as client:
        priced = ok(await client.call_tool("quote_sweep", args))
        before = quotes_in(store_path)
        for gpu in ("cpu", "cuda", "H100", "anything"):
            text = error(await client.call_tool("quote_sweep", {**args, "gpu": gpu}))
            # A form gpu never takes is refused as such first; a real one, for its target.
            refusal = "gpu applies to 'local' only" if gpu in ("cpu", "cuda") else "gpu must be"
            assert text.startswith(f"quote_sweep: {refusal}"), text
        local = {**args, "target": "local", "gpu": "cpu"}
        on_cpu = ok(await client.call_tool("quote_sweep", local))
        bad_device = error(await client.call_tool("quote_sweep", {**local, "gpu": "tpu"}))
    # H100 hardware is priced at GPU throughput, from the configuration, with no gpu argument.
    assert priced["throughput_tokens_per_s"] == 50_000.0
    assert priced["throughput_source"] == "[throughput] cuda in the configuration"
    assert quotes_in(store_path) == before + 1  # the refused ones recorded nothing
    # On this machine the device is part of the job: the price and the command follow it.
    assert on_cpu["throughput_tokens_per_s"] == 50.0 and on_cpu["params"]["device"] == "cpu"
    command = job_command(on_cpu["params"], "local", store_path, Path("out"), None)
    assert command[command.index("--device") + 1] == "cpu"
    assert "gpu must be auto, cpu, cuda or cuda:N" in bad_device


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("checkpoints", ["--num-fewshot=0"], "checkpoints[0] starts with '-'"),
        ("checkpoints", ["ok/name", "-o=x"], "checkpoints[1] starts with '-'"),
        ("checkpoints", ["a\nb"], "checkpoints[0] contains a control character"),
        ("checkpoints", ["x" * 300], "checkpoints[0] has a path component longer than 255"),
        ("checkpoints", ["/tmp/" + "y" * 256 + "/z"], "path component longer than 255"),
        ("checkpoints", [], "checkpoints is empty"),
        ("tasks", ["mmlu,gsm8k"], "tasks[0] is not a task name"),
        ("tasks", ["--limit=1"], "tasks[0] is not a task name"),
        ("tasks", ["no_such_task"], "tasks[0] is not a known task"),
        ("limit", 0, "limit must be 1 or more"),
        ("num_fewshot", -1, "num_fewshot must be between 0 and 100"),
    ],
)
async def test_references_task_names_and_numbers_are_checked_before_quoting(
    agent_env: Path, store_path: Path, gpt2_a: Path, field: str, value: Any, says: str
) -> None:
    args: dict[str, Any] = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], field: value}
    async with Client(build_server(store_path, config={})) as client:
        text = error(await client.call_tool("quote_sweep", args))
    assert says in text and text.startswith("quote_sweep: ") and "\n" not in text
    assert "Error executing tool" not in text and quotes_in(store_path) == 0
    for item in value if isinstance(value, list) else []:
        if len(item) >= 6:
            assert item not in text  # named, not echoed


def test_job_commands_put_references_after_a_double_dash(tmp_path: Path) -> None:
    from evalsweep.cli import main

    params = {
        "checkpoints": ["--num-fewshot=0", "-x"], "tasks": [TASK, "gsm8k"], "device": "cpu",
        "limit": 3, "num_fewshot": None,
    }  # fmt: skip
    command = job_command(params, "local", tmp_path / "s.sqlite", tmp_path / "out", None)
    assert command[:4] == [sys.executable, "-m", "evalsweep", "run"]
    assert command[-3:] == ["--", "--num-fewshot=0", "-x"]
    # The real parser of `evalsweep run` reads them as two checkpoints, and nothing else.
    run = main.get_command(None, "run")  # type: ignore[arg-type]
    assert run is not None
    parsed = run.make_context("run", command[4:]).params
    assert parsed["checkpoints"] == ("--num-fewshot=0", "-x")
    assert parsed["num_fewshot"] is None and parsed["limit"] == 3
    assert parsed["tasks"] == f"{TASK},gsm8k" and parsed["target"] == "local"


@pytest.mark.anyio
async def test_no_error_confirms_a_guessed_secret(
    agent_env: Path, store_path: Path, tmp_path: Path
) -> None:
    key = "sk-" + secrets.token_hex(16)
    SecretBox().set("OPENAI_API_KEY", key)
    other = "sk-" + secrets.token_hex(16)  # a wrong guess of the same shape
    async with Client(build_server(store_path, config={})) as client:
        answers = {}
        for guess in (key, other):
            for args in (
                {"checkpoints": [guess], "tasks": [TASK]},
                {"checkpoints": [f"/nowhere/{guess}"], "tasks": [TASK]},
                {"checkpoints": [str(tmp_path)], "tasks": [guess]},
                {"checkpoints": ["org/name"], "tasks": [TASK], "baseline": guess},
            ):
                tool = "compare" if "baseline" in args else "quote_sweep"
                answers.setdefault(guess, []).append(error(await client.call_tool(tool, args)))
            answers[guess].append(error(await client.call_tool("job_status", {"job_id": guess})))
            answers[guess].append(error(await client.call_tool("start_sweep", {"quote_id": guess})))
    assert answers[key] == answers[other]  # the right guess reads exactly like a wrong one
    assert not [t for t in answers[key] if key in t or "secret" in t]


@pytest.mark.anyio
async def test_every_input_field_of_every_tool_is_described(
    agent_env: Path, store_path: Path
) -> None:
    async with Client(build_server(store_path, config={})) as client:
        tools = (await client.list_tools()).tools
    missing = [
        f"{t.name}.{name}"
        for t in tools
        for name, field in (t.input_schema or {}).get("properties", {}).items()
        if not field.get("description")
    ]
    assert len(tools) == 18 and missing == []  # run_trend: the eighteenth

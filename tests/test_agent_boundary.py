"""The agent boundary by construction, through a real MCP client and real processes.

Data never acts as something else: a task file's template reaches no Python object
(in the server and in ``evalsweep run``), agents name no task file outside the folders
the person allows, every string of every tool passes one text rule, and everything a
person reads passes one renderer. Money follows what the person approved: a start
reserves at most the approved worst case, and a stopping job is billed until it stops.
Every refused call of a tool that is not read-only is audited with what it received.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sys as _sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from evalsweep.agent import build_server
from evalsweep.agent._approvals import describe_quote
from evalsweep.agent._quotes import load_quote
from evalsweep.store import Store
from evalsweep.text import REFUSED_CATEGORIES, problem, visible

sys.path.insert(0, str(Path(__file__).parent))
from test_agent_gate import approve_in_terminal, error_text, result, wait_for_end  # noqa: E402

TASK = "mmlu_abstract_algebra"
ROWS = '{"q": "What is 2+2?", "choices": ["3", "4"], "answer": 1}\n' * 2

#: Templates that reach for Python from a task file (each must fail, and none may run code).
ESCAPES = [
    "{% set g = cycler.__init__.__globals__ %}{{ g.os.system('touch CANARY') }}",
    "{{ q.__class__.__mro__[1].__subclasses__() }}",
    "{{ self.__init__.__globals__ }}",
    "{{ namespace.__init__.__globals__['os'].system('touch CANARY') }}",
    "{{ q|attr('__class__') }}",
    "{{ '{0.__class__.__init__.__globals__}'.format(q) }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'].system('touch CANARY') }}",
    "{{ (choices|list).pop() }}{{ choices.append(1) }}",
    "{{ range.__init__ }}",
    "{% for x in dict.__subclasses__() %}{{ x }}{% endfor %}",
    "{{ 'a' * 10**9 }}",
    "{{ q|map(attribute='__class__')|list }}",
]

HOSTILE = [
    "\x9b", "\x85", "\x1b[8m", "\u202e", "\u200b", "\ufeff", "\u2028", "\u2029", "\u00a0",
    "\u3000", "\ue000", "\U000e0041", "\u0378", "\x00", "\n", "\t", "\ud800",
]  # fmt: skip


def task_file(folder: Path, name: str, template: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.jsonl").write_text(ROWS)
    path = folder / f"{name}.yaml"
    path.write_text(
        "data: rows.jsonl\n"
        f"doc_to_text: {json.dumps(template)}\n"
        "doc_to_choice: choices\ndoc_to_target: answer\n"
    )
    return path


# -- the text rule and the renderer, over every code point -------------------------------


def test_every_code_point_is_refused_by_the_rule_or_shown_as_itself() -> None:
    shown_as_escape = 0
    for point in range(0x110000):
        char = chr(point)
        out = visible(char)
        category = unicodedata.category(char)
        if category in REFUSED_CATEGORIES or (category == "Zs" and char != " "):
            assert problem(char) is not None
            assert out.startswith("\\") and out.isascii() and out.isprintable(), hex(point)
            shown_as_escape += 1
        elif category[0] == "M":  # a mark alone has no letter to combine with
            assert problem(char) is not None and out.startswith("\\"), hex(point)
        else:
            assert out == char, hex(point)
        assert not any(unicodedata.category(c) in REFUSED_CATEGORIES for c in out)
    assert shown_as_escape > 900_000  # unassigned and private-use planes included


@pytest.mark.parametrize("char", HOSTILE)
def test_the_renderer_leaves_nothing_a_terminal_acts_on(char: str) -> None:
    text = f"tiny-a{char}$0.00/h{char}\nnext"
    out = visible(text, newlines=char not in "\n\t")
    assert char not in out or char in "\n\t"
    assert visible(out, newlines=char not in "\n\t") == out  # idempotent
    assert problem(f"tiny-a{char}") is not None


def test_combining_marks_show_only_on_a_letter_and_not_in_a_stack() -> None:
    assert visible("e\u0301") == "e\u0301"
    assert visible("$\u0336") == "$\\u0336"  # cannot strike through a price
    assert visible("a" + "\u0301" * 5) == "a\u0301\u0301" + "\\u0301" * 3


# -- no code from data files ----------------------------------------------------------------


@pytest.mark.parametrize("template", ESCAPES)
def test_evalsweep_run_refuses_a_template_that_reaches_for_python(
    tmp_path: Path, gpt2_a: Path, template: str
) -> None:
    path = task_file(tmp_path / "tasks", "t", template)
    store = tmp_path / "results.sqlite"
    run = subprocess.run(
        [sys.executable, "-m", "evalsweep", "run", "--tasks", str(path), "--store", str(store),
         "--no-color", "--", str(gpt2_a)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalsweep: error: "), run.stderr
    assert str(path) in lines[0] and "doc_to_text" in lines[0] and "Traceback" not in run.stderr
    assert not (tmp_path / "CANARY").exists() and not Path("CANARY").exists()
    if store.exists():
        with Store(store) as opened:
            assert opened.connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_a_plain_template_still_renders_as_lm_eval_would(tmp_path: Path) -> None:
    from evalsweep.tasks import get_task

    path = task_file(
        tmp_path, "plain", "Q: {{ q|trim }} ({{ choices|join(', ') }}) {{ q.split(' ')[0] }}"
    )
    task = get_task(str(path))
    data = task.load(None, None)  # type: ignore[arg-type]
    question = task.question(data.documents[0].fields)  # type: ignore[attr-defined]
    assert question == "Q: What is 2+2? (3, 4) What"


@pytest.mark.anyio
async def test_agents_name_no_task_file_outside_the_allowed_folders(
    agent_env: Path, store_path: Path, gpt2_a: Path, tmp_path: Path
) -> None:
    loose = task_file(tmp_path / "loose", "loose", "{{ q }}")
    shipped = task_file(gpt2_a.parent / "shipped-tasks", "evil", ESCAPES[0])
    allowed = tmp_path / "allowed"
    good = task_file(allowed, "mine", "Q: {{ q }}")
    task_file(allowed, "evil", ESCAPES[3])
    (allowed / "outside.yaml").symlink_to(loose)
    base = {"checkpoints": [str(gpt2_a)], "limit": 1}
    async with Client(build_server(store_path, config={})) as client:
        for name in (str(loose), "./x.yaml", "loose", str(shipped), "mine", str(good)):
            text = error_text(await client.call_tool("quote_sweep", {**base, "tasks": [name]}))
            assert text.startswith("quote_sweep: tasks[0] ") and "\n" not in text, text
            assert "[agent] task_dirs" in text, text
    config = {"agent": {"task_dirs": [str(allowed)]}}
    async with Client(build_server(store_path, config=config)) as client:
        listed = result(await client.call_tool("list_tasks", {}))
        files = {t["name"]: t["file"] for t in listed["tasks"] if t.get("file")}
        # Files directly in the folder (the link out of it is not one of them).
        assert files == {"mine": str(good.resolve()), "evil": str(allowed / "evil.yaml")}
        quote = result(await client.call_tool("quote_sweep", {**base, "tasks": ["mine"]}))
        assert quote["params"]["tasks"] == [str(good.resolve())]
        by_path = result(await client.call_tool("quote_sweep", {**base, "tasks": [str(good)]}))
        assert by_path["params"]["tasks"] == [str(good.resolve())]
        evil = error_text(await client.call_tool("quote_sweep", {**base, "tasks": ["evil"]}))
        # (Runs of an argument's text, here the shared start of two paths, read as "...".)
        assert evil.startswith("quote_sweep: ") and "\n" not in evil
        assert "evil.yaml: doc_to_text: template refused" in evil
        for name in (str(allowed / "outside.yaml"), str(loose), "../loose"):
            text = error_text(await client.call_tool("quote_sweep", {**base, "tasks": [name]}))
            assert text.startswith("quote_sweep: tasks[0] ") and "\n" not in text, text
    assert not Path("CANARY").exists() and not (tmp_path / "CANARY").exists()
    with Store(store_path) as store:
        approved = store.connection.execute(
            "SELECT COUNT(*) FROM agent_quotes WHERE approved IS NOT NULL"
        ).fetchone()[0]
    assert approved == 0


# -- one rule for every string, at the tool boundary -------------------------------------


def _string_arguments(checkpoint: str) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, path of the string to spoil) for every free string of every tool."""
    sweep = {"checkpoints": [checkpoint], "tasks": [TASK], "limit": 1}
    return [
        ("quote_sweep", sweep, "checkpoints.0"),
        ("quote_sweep", sweep, "tasks.0"),
        ("quote_sweep", {**sweep, "target": "local"}, "target"),
        ("quote_sweep", {**sweep, "gpu": "cuda:0"}, "gpu"),
        ("start_sweep", {"quote_id": "q-0123456789"}, "quote_id"),
        ("start_sweep", {"quote_id": "q-0123456789", "checkpoints": [checkpoint]}, "checkpoints.0"),
        ("start_sweep", {"quote_id": "q-0123456789", "tasks": [TASK]}, "tasks.0"),
        ("start_sweep", {"quote_id": "q-0123456789", "target": "local"}, "target"),
        ("start_sweep", {"quote_id": "q-0123456789", "gpu": "cpu"}, "gpu"),
        ("cancel_job", {"job_id": "j-0123456789"}, "job_id"),
        ("job_status", {"job_id": "j-0123456789"}, "job_id"),
        ("job_logs", {"job_id": "j-0123456789"}, "job_id"),
        ("results_table", {"job_id": "j-0123456789"}, "job_id"),
        ("compare", {"checkpoints": [checkpoint], "tasks": [TASK]}, "checkpoints.0"),
        ("compare", {"checkpoints": [checkpoint], "tasks": [TASK], "baseline": "x"}, "baseline"),
        ("quote_action", {"target": "local", "action": "deploy"}, "target"),
        ("quote_action", {"target": "local", "action": "deploy"}, "action"),
        ("deploy", {"quote_id": "q-0123456789"}, "quote_id"),
        ("terminate", {"quote_id": "q-0123456789"}, "quote_id"),
    ]


def _spoil(arguments: dict[str, Any], path: str, char: str, where: int) -> dict[str, Any]:
    spoiled = json.loads(json.dumps(arguments))
    parts = path.split(".")
    holder: Any = spoiled
    for part in parts[:-1]:
        holder = holder[int(part)] if isinstance(holder, list) else holder[part]
    key: Any = int(parts[-1]) if isinstance(holder, list) else parts[-1]
    value = holder[key]
    holder[key] = (
        (char + value)
        if where == 0
        else (value + char)
        if where < 0
        else (value[:2] + char + value[2:])
    )
    return spoiled


@pytest.mark.anyio
async def test_every_free_string_of_every_tool_passes_one_rule(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    read_only = {"job_status", "job_logs", "results_table", "compare"}
    cases = _string_arguments(str(gpt2_a))
    hostile = [*HOSTILE, "\u0301", " "]
    tried = 0
    with Store(store_path) as store:
        before = len(store.audit_entries(kind="refusal"))
    async with Client(build_server(store_path, config={})) as client:
        for tool, arguments, path in cases:
            for index, char in enumerate(hostile):
                where = (0, -1, 2)[index % 3] if char not in ("\u0301", " ") else 0
                spoiled = _spoil(arguments, path, char, where)
                call = await client.call_tool(tool, spoiled)
                text = error_text(call)
                assert text.startswith(f"{tool}: ") and "\n" not in text, (tool, path, text)
                assert char == " " or char not in text, (tool, path, text)
                label = path.replace(".0", "[0]")
                assert label in text or "argument" in text, (tool, path, text)
                tried += 1
    with Store(store_path) as store:
        refusals = store.audit_entries(kind="refusal")[before:]
        quotes = store.connection.execute("SELECT COUNT(*) FROM agent_quotes").fetchone()[0]
    audited = [r for r in refusals if r["detail"].get("tool") not in read_only]
    expected = sum(1 for tool, _, _ in cases if tool not in read_only) * len(hostile)
    assert tried == len(cases) * len(hostile) and len(audited) == expected
    assert all(r["detail"]["received"].isascii() for r in audited)
    assert quotes == 0


@pytest.mark.anyio
async def test_a_checkpoint_folder_whose_name_rewrites_a_screen_is_refused(
    agent_env: Path, store_path: Path, gpt2_a: Path, tmp_path: Path
) -> None:
    names = ["tiny-a\x9b8m", "tiny-a\u200b", "tiny-a\u202e", "tiny-a\x85price: $0.00"]
    async with Client(build_server(store_path, config={})) as client:
        for name in names:
            folder = tmp_path / name
            folder.symlink_to(gpt2_a, target_is_directory=True)
            args = {"checkpoints": [str(folder)], "tasks": [TASK], "limit": 1}
            text = error_text(await client.call_tool("quote_sweep", args))
            assert text.startswith("quote_sweep: checkpoints[0] contains "), text


# -- one renderer for what a person reads ----------------------------------------------------


def test_audit_on_a_terminal_shows_escapes_never_acts_on_them(
    tmp_path: Path, store_path: Path
) -> None:
    hostile = "stop job j-1\x1b[8m hidden\x9b2J\u202eevil\x85 fake row"
    with Store(store_path) as store:
        store.audit_event("refusal", hostile, detail={"received": "{}", "tool": "deploy"})
        store.audit_event("stop", "after it")
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "300", "TERM": "xterm-256color"}
    run = subprocess.run(
        [_sys.executable, "-m", "evalsweep", "audit", "--store", str(store_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    for raw in ("\x1b[8m", "\x9b", "\u202e", "\x85", "\x1b[2J"):
        assert raw not in out
    assert "\\x1b[8m" in out and "\\x9b2J" in out and "\\u202e" in out and "after it" in out
    assert len({len(line) for line in out.splitlines()[2:-1]}) <= 2  # the columns still align
    assert "\x1b[" in out  # the console's own colours still reach the terminal


def test_describe_quote_renders_names_visibly(store_path: Path, tmp_path: Path) -> None:
    from evalsweep.agent._quotes import create_quote

    with Store(store_path) as store:
        quote = create_quote(
            store,
            kind="sweep",
            target="local",
            params={"checkpoints": ["tiny-a\x9b8m", "tiny-\u0430"], "tasks": [TASK], "limit": 1},
            preview={"hardware": "cpu\x1b[8m", "max_cost": 0.0},
            hourly_rate=0.0,
            estimated_cost=0.0,
            needs_approval=True,
            ttl_s=60,
        )
        line = describe_quote(load_quote(store, quote.quote_id))
    assert "\x9b" not in line and "\x1b" not in line
    assert "tiny-a\\x9b8m" in line and "cpu\\x1b[8m" in line
    assert "tiny-\u0430 ['tiny-\\u0430']" in line  # a look-alike letter is spelled out


def test_evalsweep_run_prints_a_hostile_checkpoint_name_escaped(
    tmp_path: Path, gpt2_a: Path, data_dir: Path
) -> None:
    folder = tmp_path / "tiny-a\x9b31m\u200b"
    folder.symlink_to(gpt2_a, target_is_directory=True)
    run = subprocess.run(
        [_sys.executable, "-m", "evalsweep", "run", "--tasks", TASK, "--limit", "2",
         "--data-dir", str(data_dir), "--store", str(tmp_path / "r.sqlite"), "--", str(folder)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "FORCE_COLOR": "1", "COLUMNS": "200"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    both = run.stdout + run.stderr
    assert "\x9b" not in both and "\u200b" not in both
    assert "tiny-a\\x9b31m\\u200b" in both


# -- money follows the approval ---------------------------------------------------------------


def paid(limit_usd: float) -> dict[str, Any]:
    return {
        "rates": {"local": 36.0},
        "limits": {"per_connection_usd": limit_usd, "global_usd": 100.0},
        "throughput": {"startup_s": 0, "per_checkpoint_s": 0},
    }


def ledger_rows(store_path: Path) -> dict[str, dict[str, Any]]:
    with Store(store_path) as store:
        rows = store.connection.execute(
            "SELECT item, started, ended, reserved, hourly_rate FROM agent_ledger"
        ).fetchall()
    return {r[0]: {"started": r[1], "ended": r[2], "reserved": r[3], "rate": r[4]} for r in rows}


def job_ended(store_path: Path, job_id: str) -> float | None:
    with Store(store_path) as store:
        row = store.connection.execute(
            "SELECT ended, exit_code FROM agent_jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
    return None if row[1] is None else float(row[0])


async def approved_start(client: Client, store_path: Path, args: dict[str, Any]) -> Any:
    quote = result(await client.call_tool("quote_sweep", args))
    code, screen = approve_in_terminal(store_path, quote["quote_id"])
    assert code == 0, screen
    return quote, await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]})


@pytest.mark.anyio
async def test_a_start_reserves_at_most_the_approved_worst_case_and_a_zero_one_is_refused(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 50}
    async with Client(build_server(store_path, config=paid(1.0))) as client:
        first, started = await approved_start(client, store_path, args)
        job = result(started)
        assert job["reserved_usd"] <= first["max_cost"] + 1e-9
        # While the first holds the whole limit, a quote's worst case is $0.
        second = result(await client.call_tool("quote_sweep", args))
        assert second["max_cost"] == 0.0 and second["estimated_cost"] > 0
        code, screen = approve_in_terminal(store_path, second["quote_id"])
        assert code == 0 and "worst case $0.0000" in screen and "will be refused" in screen
        await client.call_tool("cancel_job", {"job_id": job["job_id"]})
        with anyio.fail_after(120):
            while job_ended(store_path, job["job_id"]) is None:
                await anyio.sleep(0.2)
        text = error_text(await client.call_tool("start_sweep", {"quote_id": second["quote_id"]}))
        assert "showed a worst case of $0.0000, less than its estimate" in text
        assert text.endswith("quote again") and "\n" not in text
        third, again = await approved_start(client, store_path, args)
        assert result(again)["reserved_usd"] <= third["max_cost"] + 1e-9
        await client.call_tool("cancel_job", {"job_id": result(again)["job_id"]})
    assert len(ledger_rows(store_path)) == 2  # the refused start reserved nothing


@pytest.mark.anyio
async def test_a_cancelled_job_is_billed_until_it_has_stopped(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 50}
    async with Client(build_server(store_path, config=paid(1.0))) as client:
        _, started = await approved_start(client, store_path, args)
        job_id = result(started)["job_id"]
        await anyio.sleep(1.0)  # running, its supervisor's signal handling in place
        cancelled = result(await client.call_tool("cancel_job", {"job_id": job_id}))
        at_cancel = time.time()
        assert cancelled["stopped"] is True
        again = result(await client.call_tool("cancel_job", {"job_id": job_id}))
        assert again["stopped"] is False
        row = ledger_rows(store_path)[job_id]
        exited = job_ended(store_path, job_id)
        # Open while the job stops (or already closed at its real exit, never before it).
        assert row["ended"] is None or (exited is not None and row["ended"] == exited)
        assert row["reserved"] <= 36.0 * (at_cancel + 10.5 - row["started"]) / 3600
        # A start right after the cancel cannot take what the stopping job still spends.
        _, next_start = await approved_start(client, store_path, args)
        second = result(next_start)
        with anyio.fail_after(120):
            while job_ended(store_path, job_id) is None:
                await anyio.sleep(0.2)
        await client.call_tool("cancel_job", {"job_id": second["job_id"]})
    rows = ledger_rows(store_path)
    first = rows[job_id]
    assert first["ended"] == job_ended(store_path, job_id)  # billed to the real exit
    spent_first = first["rate"] * (first["ended"] - first["started"]) / 3600
    assert spent_first + second["reserved_usd"] <= 1.0 + 1e-6


# -- every refusal of a tool that spends or approves is audited -----------------------------


@pytest.mark.anyio
async def test_calls_refused_by_validation_are_audited_with_what_was_received(
    agent_env: Path, store_path: Path
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("start_sweep", {"quote_id": "q-0123456789", "consent": {"approve": True}}),
        ("start_sweep", {"quote_id": 12345}),
        ("start_sweep", {"quote_id": ["q-0123456789"]}),
        ("start_sweep", {}),
        ("deploy", {"quote_id": "q-0123456789", "approved": True}),
        ("quote_sweep", {"checkpoints": ["x"], "tasks": [TASK], "limit": True}),
        ("cancel_job", {"job_id": None}),
        ("approve_quote", {"quote_id": "q-0123456789"}),  # no such tool
        ("start_sweep", {"quote_id": "q-\u200b123456789"}),
    ]
    async with Client(build_server(store_path, config={})) as client:
        for tool, arguments in calls:
            call = await client.call_tool(tool, arguments)
            assert call.is_error
    with Store(store_path) as store:
        refusals = store.audit_entries(kind="refusal")
    assert len(refusals) == len(calls)
    for (tool, arguments), entry in zip(calls, refusals, strict=True):
        if tool == "approve_quote":  # no such tool: its name is kept only inside received
            assert entry["detail"]["tool"] == "(no such tool)"
            sent = {"name": tool, "arguments": arguments}
            assert entry["detail"]["received"] == json.dumps(sent, sort_keys=True)
            assert entry["text"] == "evalsweep: no tool of that name (see the tool list)"
            continue
        assert entry["detail"]["tool"] == tool
        assert entry["detail"]["received"] == json.dumps(arguments, sort_keys=True)
        assert entry["text"].startswith(f"{tool}: ")


@pytest.mark.anyio
async def test_over_stdio_the_rule_the_template_sandbox_and_the_audit_hold(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str], data_dir: Path, gpt2_a: Path
) -> None:
    from mcp import StdioServerParameters

    allowed = tmp_path / "allowed"
    task_file(allowed, "evil", ESCAPES[3])
    config = tmp_path / "config.toml"
    config.write_text(f"[agent]\ntask_dirs = [{json.dumps(str(allowed))}]\n")
    env = {**cli_env, "EVALSWEEP_CONFIG": str(config), "EVALSWEEP_DATA_DIR": str(data_dir)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "evalsweep", "mcp", "--store", str(store_path)],
        env=env, cwd=str(tmp_path),
    )  # fmt: skip
    calls = [
        ("quote_sweep", {"checkpoints": [f"{gpt2_a}\x9b"], "tasks": [TASK]}),
        ("quote_sweep", {"checkpoints": [str(gpt2_a)], "tasks": ["evil"], "limit": 1}),
        ("quote_sweep", {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "gpu": "cuda:\x1b[8m"}),
        ("start_sweep", {"quote_id": "q-0123456789", "consent": {"approve": True}}),
    ]
    async with Client(params, read_timeout_seconds=120) as client:
        texts = [error_text(await client.call_tool(tool, args)) for tool, args in calls]
    assert texts[0].startswith("quote_sweep: checkpoints[0] contains a control character U+009B")
    assert "template refused" in texts[1] and texts[2] == (
        "quote_sweep: gpu contains a control character U+001B at position 5"
    )
    assert "unknown argument 'consent'" in texts[3]  # a tool's argument: a public word
    assert not (tmp_path / "CANARY").exists()
    with Store(store_path) as store:
        refusals = store.audit_entries(kind="refusal")
    assert [e["detail"]["received"] for e in refusals] == [
        json.dumps(args, sort_keys=True) for _, args in calls
    ]


# -- what an outside review found: names, protocol refusals, sessions, starts, orphans -------


@pytest.mark.anyio
async def test_a_tool_name_or_argument_name_is_never_echoed_and_cannot_forge_audit_lines(
    agent_env: Path, store_path: Path
) -> None:
    from evalsweep.secrets import SecretBox

    secret = "hf_SuperSecret42xyz"
    SecretBox().set("HF_TOKEN", secret)
    forged = 'cancel_job\nreceived by cancel_job: {"job_id": "j-0000000000"}\napproved q-1 by me'
    async with Client(build_server(store_path, config={})) as client:
        unknown = error_text(await client.call_tool(forged, {"job_id": "j-1111111111"}))
        huge = error_text(await client.call_tool("x" * 200_000, {}))
        as_secret = error_text(await client.call_tool(secret, {}))
        right = error_text(await client.call_tool("job_logs", {"job_id": "j-1", secret: 1}))
        wrong = error_text(await client.call_tool("job_logs", {"job_id": "j-1", "hf_Wrong42x": 1}))
        right_w = error_text(await client.call_tool("cancel_job", {"job_id": "j-1", secret: 1}))
    assert unknown == huge == as_secret == "evalsweep: no tool of that name (see the tool list)"
    assert right == wrong and "secret" not in right and "Wrong" not in wrong
    assert "it takes: job_id" in right_w
    with Store(store_path) as store:
        refusals = store.audit_entries(kind="refusal")
    assert len(refusals) == 4  # the three unknown tools and the refused cancel_job
    for entry in refusals:
        assert "\n" not in entry["text"] and secret not in json.dumps(entry)
    assert [e["detail"]["tool"] for e in refusals] == ["(no such tool)"] * 3 + ["cancel_job"]
    assert len(refusals[1]["detail"]["received"]) <= 65_536
    shown = subprocess.run(
        [sys.executable, "-m", "evalsweep", "audit", "--store", str(store_path), "--no-color"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"},
    ).stdout  # fmt: skip
    # One line per refusal says what was received; a forged one stays inside the escaped
    # JSON, after a visible \n.
    assert len(re.findall(r"(?<!\\n)received by", shown)) == 4
    assert "approved q-1" not in shown.replace("\\napproved q-1", "")


def test_a_call_the_protocol_layer_refuses_is_audited(
    store_path: Path, cli_env: dict[str, str], agent_env: Path
) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "evalsweep", "mcp", "--store", str(store_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**cli_env, "EVALSWEEP_CONFIG": str(agent_env)}, text=True,
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, Any]) -> None:
        server.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]

    def answer(wanted: int) -> dict[str, Any]:
        while True:
            line = server.stdout.readline()  # type: ignore[union-attr]
            assert line, "the server closed its output"
            message = json.loads(line)
            if message.get("id") == wanted:
                return dict(message)

    try:
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})  # fmt: skip
        answer(0)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        bad = ["q-0123456789", ["q-0123456789"], 7]
        for number, arguments in enumerate(bad, start=1):
            send({"jsonrpc": "2.0", "id": number, "method": "tools/call",
                  "params": {"name": "start_sweep", "arguments": arguments}})  # fmt: skip
            assert "error" in answer(number)
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    with Store(store_path) as store:
        refusals = store.audit_entries(kind="refusal")
    assert [e["detail"]["received"] for e in refusals] == [json.dumps(a) for a in bad]
    # The audit says what the client was told.
    assert all(
        e["text"] == "start_sweep: refused by the protocol layer: Invalid request parameters"
        for e in refusals
    ), [e["text"] for e in refusals]


def test_a_client_header_names_no_connection_of_its_own(
    tmp_path: Path, cli_env: dict[str, str], agent_env: Path, store_path: Path
) -> None:
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "evalsweep", "mcp", "--http", "--port", str(port),
         "--store", str(store_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**cli_env, "EVALSWEEP_CONFIG": str(agent_env)},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(120):
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        connections = []
        for session in ("one-client-A", "one-client-B", None):
            headers = {"Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream",
                       "mcp-method": "tools/call", "mcp-name": "spend",
                       "mcp-protocol-version": "2026-07-28"}  # fmt: skip
            if session:
                headers["mcp-session-id"] = session
            meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "spend", "arguments": {}, "_meta": meta}}  # fmt: skip
            reply = httpx.post(url, headers=headers, json=body, timeout=60).text
            if "data:" in reply[:40]:
                reply = [line[5:] for line in reply.splitlines() if line.startswith("data:")][-1]
            connections.append(json.loads(reply)["result"]["structuredContent"]["connection"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(set(connections)) == 1 and "/" not in connections[0]


@pytest.mark.anyio
async def test_a_start_that_fails_before_its_job_runs_holds_nothing(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    (store_path.parent / "evalsweep-jobs").write_text("in the way")
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 2}
    async with Client(build_server(store_path, config=paid(5.0))) as client:
        quote = result(await client.call_tool("quote_sweep", args))
        assert approve_in_terminal(store_path, quote["quote_id"])[0] == 0
        text = error_text(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        spend = result(await client.call_tool("spend", {}))
    assert text.startswith("start_sweep: ") and "\n" not in text
    assert spend["global_reserved_usd"] == 0.0 and spend["running_usd_per_hour"] == 0.0
    assert all(row["ended"] is not None for row in ledger_rows(store_path).values())


@pytest.mark.anyio
async def test_a_job_being_started_is_not_lost_and_orphans_are_stopped_and_billed(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    import signal

    from evalsweep.agent._jobs import job_processes

    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 50}
    async with Client(build_server(store_path, config=paid(5.0))) as client:
        _, started = await approved_start(client, store_path, args)
        job_id = result(started)["job_id"]
        with Store(store_path) as store:  # as another server sees it while the job starts
            pid = store.connection.execute(
                "SELECT pid FROM agent_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
            with store.connection:
                store.connection.execute(
                    "UPDATE agent_jobs SET pid = NULL WHERE job_id = ?", (job_id,)
                )
        async with Client(build_server(store_path, config=paid(5.0))) as other:
            listed = result(await other.call_tool("list_jobs", {}))
            assert listed["jobs"][0]["status"] == "running"
        with Store(store_path) as store, store.connection:
            store.connection.execute(
                "UPDATE agent_jobs SET pid = ? WHERE job_id = ?", (pid, job_id)
            )
        with anyio.fail_after(60):
            while not job_processes(job_id) or len(job_processes(job_id)) < 2:
                await anyio.sleep(0.2)
        os.kill(pid, signal.SIGKILL)  # the supervisor alone dies (an out-of-memory kill)
        killed_at = time.time()
        status = await wait_for_end(client, job_id, timeout=60)
    assert status["status"] == "lost" and "processes were stopped" in status["reason"]
    assert job_processes(job_id) == []
    assert ledger_rows(store_path)[job_id]["ended"] >= killed_at  # billed until they stopped


@pytest.mark.anyio
async def test_a_checkpoint_swapped_after_the_start_is_refused_by_the_job(
    agent_env: Path, store_path: Path, gpt2_a: Path, gpt2_b: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(gpt2_a, target_is_directory=True)
    args = {"checkpoints": [str(link)], "tasks": [TASK], "limit": 2}
    async with Client(build_server(store_path, config={})) as client:
        quote = result(await client.call_tool("quote_sweep", args))
        started = result(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        link.unlink()
        link.symlink_to(gpt2_b, target_is_directory=True)
        status = await wait_for_end(client, started["job_id"], timeout=300)
        log = result(await client.call_tool("job_logs", {"job_id": started["job_id"]}))["text"]
    assert status["status"] == "failed" and "is not the one approved" in log


@pytest.mark.anyio
async def test_a_task_file_changed_after_the_start_is_refused_by_the_job(
    agent_env: Path, store_path: Path, gpt2_a: Path, tmp_path: Path
) -> None:
    allowed = tmp_path / "allowed"
    task_file(allowed, "capitals", "Q: {{ q }}")
    config = {"agent": {"task_dirs": [str(allowed)]}}
    args = {"checkpoints": [str(gpt2_a)], "tasks": ["capitals"], "limit": 2}
    async with Client(build_server(store_path, config=config)) as client:
        quote = result(await client.call_tool("quote_sweep", args))
        started = result(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        (allowed / "rows.jsonl").write_text(ROWS.replace("2+2", "SWAPPED"))
        status = await wait_for_end(client, started["job_id"], timeout=300)
        log = result(await client.call_tool("job_logs", {"job_id": started["job_id"]}))["text"]
    assert status["status"] == "failed" and "prompts are not the ones approved" in log


@pytest.mark.anyio
@pytest.mark.parametrize(
    "shape",
    ["{}\\x", "{}'", '{}"', "{}\u00e4", "x" * 200 + "{}", "{}  tail", "  {}"],
    ids=["backslash", "quote", "dquote", "non-ascii", "long", "spaces", "lead"],
)
async def test_no_error_confirms_a_guess_at_a_secret(
    agent_env: Path, store_path: Path, shape: str
) -> None:
    from evalsweep.secrets import SecretBox

    secret = "hf_SuperSecretValue123"
    SecretBox().set("HF_TOKEN", secret)
    seen: dict[str, list[str]] = {}
    async with Client(build_server(store_path, config={})) as client:
        for guess in (secret, "hf_SuperSecretValue124"):
            value = shape.format(guess)
            calls = [
                ("quote_sweep", {"checkpoints": ["./x"], "tasks": [TASK], "target": value}),
                ("quote_sweep", {"checkpoints": [f"/nowhere/{value}"], "tasks": [TASK]}),
                ("compare", {"checkpoints": ["a/b", f"c/{value}"], "tasks": [TASK]}),
                ("compare", {"checkpoints": ["a/b", "c/d"], "tasks": [TASK], "baseline": value}),
                ("quote_action", {"target": value, "action": "deploy"}),
            ]
            texts = []
            for tool, arguments in calls:
                texts.append(error_text(await client.call_tool(tool, arguments)))
            seen[guess] = [t.replace(guess, "GUESS") for t in texts]
    right, wrong = seen.values()
    assert right == wrong  # the same words, whether the guess is right or not
    assert not any("secret" in t for t in right)
    with Store(store_path) as store:
        for entry in store.audit_entries(kind="refusal"):
            assert secret not in json.dumps(entry, ensure_ascii=False)


@pytest.mark.anyio
@pytest.mark.parametrize("secret", ["slash/secret-1", "plus+eq=ti~de-1", "dots.and_under-1"])
async def test_the_audit_masks_a_secret_whatever_characters_it_holds(
    agent_env: Path, store_path: Path, secret: str
) -> None:
    from evalsweep.secrets import SecretBox

    SecretBox().set("ODD_TOKEN", secret)
    async with Client(build_server(store_path, config={})) as client:
        await client.call_tool(
            "quote_sweep", {"checkpoints": ["x"], "tasks": [TASK], "target": secret}
        )
        await client.call_tool("start_sweep", {"quote_id": "q-0123456789", secret: 1})
    with Store(store_path) as store:
        entries = store.audit_entries(kind="refusal")
    assert len(entries) == 2
    for entry in entries:
        whole = entry["text"] + entry["detail"]["received"]
        for form in (secret, json.dumps(secret)[1:-1], secret.replace("/", "\\/")):
            assert form not in whole
        assert "[secret ODD_TOKEN]" in entry["detail"]["received"]


@pytest.mark.anyio
async def test_an_approval_question_is_answered_only_by_the_call_that_asked(
    agent_env: Path, store_path: Path, gpt2_a: Path
) -> None:
    from mcp.types import ElicitResult

    asked, answer = anyio.Event(), anyio.Event()

    async def person(*_: Any) -> ElicitResult:
        asked.set()
        await answer.wait()
        return ElicitResult(action="accept", content={"approve": True})

    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 1}
    server = build_server(store_path, config=paid(5.0))
    outcome: dict[str, Any] = {}
    async with Client(server, elicitation_callback=person) as asking, Client(server) as other:
        quote = result(await asking.call_tool("quote_sweep", args))

        async def start() -> None:
            outcome["a"] = await asking.call_tool("start_sweep", {"quote_id": quote["quote_id"]})

        async with anyio.create_task_group() as group:
            group.start_soon(start)
            with anyio.fail_after(60):
                await asked.wait()
            text = error_text(await other.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
            answer.set()
        job = result(outcome["a"])
        await asking.call_tool("cancel_job", {"job_id": job["job_id"]})
    assert "needs the person's approval" in text
    with Store(store_path) as store:
        texts = [e["text"] for e in store.audit_entries()]
    assert not any("declined" in t for t in texts), texts
    assert any(t.startswith(f"approved {quote['quote_id']} by the person") for t in texts)


@pytest.mark.parametrize(
    "template",
    [
        '{{ "%300000000d"|format(1) }}',
        '{{ "x".center(300000000) }}',
        '{{ "x".ljust(2e8) }}',
        '{{ "%.900000000f" % 1.5 }}',
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        '{% for i in range(1000) %}{{ "y" * 999999 }}{% endfor %}',
        '{{ ("y" * 900000) ~ ("y" * 900000) }}',
        "{{ range(10**7)|list|length }}",
        "{% set s = 'x' * 2000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(9) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "{% set s = 'x' * 25000 %}{{ (s|replace('x', s))|length }}",
        "{% set s = 'x' * 100000 %}{{ s.replace('x', s)|length }}",
        "{{ ('y\\n' * 500000)|indent(100) }}",
        "{{ '{:>999999999}'.format(1) }}",
        "{% set l = ['x' * 100000] * 100 %}{{ l|join(',')|length }}",
        "{{ (('x' * 900000) + ('y' * 900000))|length }}",
        "{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}",
    ],
)
def test_a_template_cannot_take_the_memory_or_the_time(tmp_path: Path, template: str) -> None:
    import resource

    from evalsweep.errors import TaskError
    from evalsweep.tasks import get_task

    path = task_file(tmp_path, "t", template)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    with pytest.raises(TaskError, match="template (refused|nests too deeply)"):
        get_task(str(path)).load(None, None)  # type: ignore[arg-type]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200 and time.process_time() - started < 10


@pytest.mark.anyio
async def test_the_audit_keeps_every_argument_and_tells_a_mask_from_text_that_looks_like_one(
    agent_env: Path, store_path: Path
) -> None:
    from evalsweep.secrets import SecretBox

    secret = "hunter2secret"
    SecretBox().set("MYTOKEN", secret)
    sent = {"quote_id": "q-0123456789", secret: 1, "[secret MYTOKEN]": 2}
    async with Client(build_server(store_path, config={})) as client:
        assert (await client.call_tool("start_sweep", sent)).is_error
    with Store(store_path) as store:
        (entry,) = store.audit_entries(kind="refusal")
    received = json.loads(entry["detail"]["received"])
    assert set(received) == {"quote_id", "[secret MYTOKEN]"} or (
        len(received) == 3 and secret not in entry["detail"]["received"]
    )
    assert "\\u005bsecret MYTOKEN]" in entry["detail"]["received"]  # the one sent as text
    assert entry["detail"]["received"].count("[secret MYTOKEN]") == 1  # the real mask


@pytest.mark.anyio
@pytest.mark.parametrize("secrets_file", ['{"A": "x"', "[" * 100000, '{"1A": "x"}'])
async def test_unreadable_secrets_make_every_tool_one_line_that_shows_nothing(
    agent_env: Path, store_path: Path, secrets_file: str
) -> None:
    from evalsweep.secrets import SecretBox

    SecretBox().set("HF_TOKEN", "hf_abcdefgh")
    (agent_env.parent / "secrets.json").write_text(secrets_file)
    async with Client(build_server(store_path, config={})) as client:
        for tool, arguments in (("list_tasks", {}), ("job_status", {"job_id": "j-0123456789"})):
            line = error_text(await client.call_tool(tool, arguments))
            assert line.startswith(f"{tool}: nothing is shown while the secrets cannot be read: ")
            assert "secrets.json" in line and "\n" not in line

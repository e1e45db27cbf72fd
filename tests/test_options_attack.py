"""An outside reviewer's attack on the options contract: what runs is what was asked.

A job, a remote run or a quote runs exactly the sweep that was asked for, and no
input becomes an option. These tests throw values at that promise that do not
survive a command line (commas, white space of every kind, NUL, non-finite floats,
out-of-range numbers, text that looks like a flag), environment variables of the
machine that runs the words, and an agent's arguments that the schema could drop
or coerce. Real parts: click's own parser, the real MCP server and client, the
real secret box and the real ssh target's command.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from mcp import Client

from evalsweep.agent import build_server
from evalsweep.agent._jobs import job_command
from evalsweep.agent._options import quoted_spec
from evalsweep.agent._quotes import load_quote
from evalsweep.cli import main
from evalsweep.compute import SweepJob
from evalsweep.engine import SweepSpec
from evalsweep.errors import ConfigError
from evalsweep.options import (
    OPTIONS,
    Option,
    build_spec,
    environment_names,
    from_argv,
    spec_values,
    to_argv,
    words_only_environment,
)
from evalsweep.secrets import SecretBox
from evalsweep.store import Store
from evalsweep.tasks import HumanEval

TASK = "mmlu_abstract_algebra"
RUN = main.get_command(click.Context(main), "run")
NUMBERS = [o for o in OPTIONS if o.kind in ("int", "float")]


def parse_run(argv: list[str]) -> dict[str, Any]:
    """``evalsweep run``'s own parser on ``argv`` (nothing runs)."""
    assert RUN is not None
    return dict(RUN.make_context("run", list(argv)).params)


# -- task names and references on a command line ----------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a,b.yaml",  # two tasks read back
        " mmlu",  # stripped: another name
        "mmlu ",
        "\u2028x.yaml",  # Unicode line separator at an end
        "x.yaml\u0085",  # NEL
        "\u00a0mmlu",  # no-break space
        "\u3000mmlu",  # ideographic space
        "mmlu\x00",  # NUL: no argv carries it
        "",
        ",",
    ],
)
def test_a_task_entry_that_reads_back_otherwise_is_refused_by_index(name: str) -> None:
    with pytest.raises(ConfigError, match=r"tasks\[1\]: cannot be written as"):
        to_argv(SweepSpec(["a"], [TASK, name]))
    with pytest.raises(ConfigError, match=r"tasks\[1\]"):
        quoted_spec({"checkpoints": ["a"], "tasks": [TASK, name], "data_dir": None})


@pytest.mark.parametrize(
    "name",
    ["a=b.yaml", "-x.yaml", "--limit=1.yaml", "my task.yaml", "d\u2028e.yaml", "é" * 300,
     "http://host/t.yaml", "tasks/--debug.toml"],
)  # fmt: skip
def test_task_entries_that_read_back_travel_as_they_are(name: str) -> None:
    argv = to_argv(SweepSpec(["a"], [TASK, name]))
    assert list(from_argv(argv).spec.tasks) == [TASK, name]
    parsed = parse_run(argv)
    assert list(build_spec(parsed.pop("checkpoints"), parsed).tasks) == [TASK, name]


@pytest.mark.parametrize(
    "references",
    [
        ["--num-fewshot=0", "-", "-x"],
        ["--", "a"],  # a second -- is a reference
        ["http://example.invalid/m", "org/m@rev", "a b", "line\u2028sep", "x" * 5000],
    ],
)
def test_references_that_look_like_flags_stay_references(references: list[str]) -> None:
    spec = SweepSpec(references, [TASK], num_fewshot=3)
    argv = to_argv(spec)
    read = from_argv(argv).spec
    assert list(read.checkpoints) == references and read.num_fewshot == 3
    assert list(parse_run(argv)["checkpoints"]) == references


@pytest.mark.parametrize("references", [["a\x00b"], ["ok", ""]])
def test_a_reference_no_argv_can_carry_is_refused_by_index(references: list[str]) -> None:
    with pytest.raises(ConfigError, match=rf"checkpoints\[{len(references) - 1}\]"):
        to_argv(SweepSpec(references, [TASK]))


TEXT_VALUES = ["--debug", "-", "", "a=b", "a,b", "a\nb", "\u2028", "'\"$(x)`", "x" * 5000]


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o.travels and o.kind in ("text", "folder")
               and o.name not in ("tasks", "baseline") and o.pattern is None],
    ids=lambda o: o.name,
)  # fmt: skip
@pytest.mark.parametrize("value", TEXT_VALUES, ids=[f"text{i}" for i in range(len(TEXT_VALUES))])
def test_every_free_text_option_carries_hostile_text_exactly(option: Option, value: str) -> None:
    values = {"tasks": TASK, option.name: value}
    if option.name == "system_instruction":
        values["apply_chat_template"] = True
    spec = build_spec(["a"], values)
    if option.kind == "folder" and value == "":  # a path reads "" as "." (another folder)
        with pytest.raises(ConfigError, match=option.flag):
            to_argv(spec)
        return
    argv = to_argv(spec)
    read = from_argv(argv).spec
    assert spec_values(read) == spec_values(spec)
    assert list(read.checkpoints) == ["a"]  # the value did not become an option or a reference


PATTERNED = [o for o in OPTIONS if o.pattern is not None]


def test_the_device_is_a_patterned_option() -> None:
    assert {o.name for o in PATTERNED} == {"device", "pinned", "steps"}


HOSTILE_FORMS = [
    *TEXT_VALUES, "cuda:", "cuda:0\n  price: $0.00/h", "cuda:\x1b[8m", "cuda:" + "9" * 5000,
    "CUDA", " cpu", "cpu ", "cuda:0\u200b", "cuda:\u0661", "cuda:1234", "1:2\n", " 1:2",
    "1:2:3:4", "\u0661:\u0662", "1e3:", "-1:5", "100 200\n- 300", "1  2", "1 -\x1b[K",
]  # fmt: skip


@pytest.mark.parametrize(
    ("option", "value"),
    [(o, v) for o in PATTERNED for v in HOSTILE_FORMS if not re.fullmatch(o.pattern or "", v)],
    ids=lambda item: item.name if isinstance(item, Option) else f"v{len(str(item))}",
)
def test_a_patterned_option_refuses_every_other_form_by_name(option: Option, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_spec(["a"], {"tasks": TASK, option.name: value})
    assert str(caught.value) == f"{option.flag} must be {option.pattern_help}"  # never echoed
    if not option.travels:
        return  # written by no argv of a sweep (the job's command adds it itself)
    spec = build_spec(["a"], {"tasks": TASK})  # and no written argv can carry one either
    object.__setattr__(spec.options, option.attribute, value)
    with pytest.raises(ConfigError, match=option.flag):
        to_argv(spec)


@pytest.mark.parametrize("value", ["auto", "cpu", "cuda", "cuda:0", "cuda:15", "cuda:123"])
def test_the_device_forms_it_takes_travel_exactly(value: str) -> None:
    spec = build_spec(["a"], {"tasks": TASK, "device": value})
    assert from_argv(to_argv(spec)).spec.options.device == value


def test_a_system_instruction_with_newlines_and_quotes_reaches_the_spec() -> None:
    text = 'Answer "A" only.\nNo prose.\r\n--debug'
    spec = build_spec(["a"], {"tasks": TASK, "system_instruction": text})
    assert from_argv(to_argv(spec)).spec.chat.system_instruction == text


# -- numbers ------------------------------------------------------------------------------


def bad_numbers(option: Option) -> list[float]:
    found: list[float] = []
    if option.kind == "float":
        found += [math.nan, math.inf, -math.inf]
    if option.minimum is not None:
        found.append(option.minimum - (1 if option.kind == "int" else 0.5))
    if option.maximum is not None:
        found.append(option.maximum + 1)
    return found


BAD = [(o, v) for o in NUMBERS for v in bad_numbers(o)]


@pytest.mark.parametrize(("option", "value"), BAD, ids=[f"{o.name}={v}" for o, v in BAD])
def test_a_number_out_of_its_bounds_is_refused_alike_on_every_path(
    option: Option, value: float, tmp_path: Path
) -> None:
    written = str(int(value)) if option.kind == "int" else repr(value)
    store = tmp_path / "s.sqlite"
    ran = CliRunner().invoke(
        main, ["run", "--tasks", "humaneval", option.flag, written, "--store", str(store), "a"]
    )
    assert ran.exit_code not in (0, 1), ran.output
    (line,) = ran.output.strip().splitlines()
    assert line.startswith("evalsweep: error: ") and option.flag in line
    assert not store.exists()  # refused before anything was opened
    with pytest.raises(ConfigError, match=option.flag):
        from_argv(["--tasks", "humaneval", option.flag, written, "--", "a"])
    values: dict[str, Any] = {"tasks": "humaneval", option.name: value}
    if option.name == "temperature" and value == value and value > 0:  # inf: a sampler needs n
        values["samples_per_problem"] = 2
    try:
        spec = build_spec(["a"], values)
    except Exception:  # noqa: BLE001 - refused on the way in is refused too
        return
    with pytest.raises(ConfigError, match=option.flag):
        to_argv(spec)


def test_every_bounded_option_declares_its_bounds() -> None:
    # Counts and sizes have a floor; a share has a ceiling (a new number option must say).
    for option in NUMBERS:
        assert option.minimum is not None, f"{option.name}: declare its minimum"
    assert next(o for o in NUMBERS if o.name == "gpu_memory_utilization").maximum == 1.0


@pytest.mark.parametrize("value", [5e-324, 1e-320, 0.1 + 0.2, 1e308, -0.0])
def test_float_edge_values_survive_bit_for_bit(value: float) -> None:
    samples = 2 if value > 0 else 1
    spec = SweepSpec(["a"], [HumanEval(samples=samples, temperature=value, ks=(1,))])
    (task,) = from_argv(to_argv(spec)).spec.tasks
    assert isinstance(task, HumanEval)
    assert task.temperature == value
    assert math.copysign(1.0, task.temperature) == math.copysign(1.0, value)


@pytest.mark.parametrize("limit", [1, 10**30])
def test_huge_whole_numbers_survive(limit: int) -> None:
    assert from_argv(to_argv(SweepSpec(["a"], [TASK], limit=limit))).spec.limit == limit


# -- environment ------------------------------------------------------------------------


def test_every_option_variable_is_known_and_dropped_from_a_jobs_environment() -> None:
    assert set(environment_names()) == {o.envvar for o in OPTIONS if o.envvar}
    assert {"EVALSWEEP_DATA_DIR", "EVALSWEEP_TARGET", "EVALSWEEP_STORE"} <= set(environment_names())
    here = {name: "/elsewhere" for name in environment_names()}
    here.update({"PATH": "/bin", "EVALSWEEP_TASK_DIRS": "/mine"})
    secret = {"HF_TOKEN": "hf_abcdef", "EVALSWEEP_TASK_DIRS": "/evil", "EVALSWEEP_DATA_DIR": "/x"}
    env = words_only_environment(here, secret)
    assert not set(environment_names()) & set(env)
    assert env["HF_TOKEN"] == "hf_abcdef" and env["PATH"] == "/bin"
    assert env["EVALSWEEP_TASK_DIRS"] == "/mine"  # what the quote was planned with


def test_a_secret_cannot_be_named_like_a_setting(tmp_path: Path) -> None:
    box = SecretBox(tmp_path)
    for name in ("EVALSWEEP_DATA_DIR", "EVALSWEEP_TASK_DIRS", "EVALSWEEP_TARGET"):
        with pytest.raises(ConfigError, match="EVALSWEEP_"):
            box.set(name, "/somewhere")
    box.set("HF_TOKEN", "hf_abcdef")
    assert box.names() == ["HF_TOKEN"]


def test_written_words_read_the_same_whatever_this_machine_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = SweepSpec(["a"], [TASK], limit=2)
    argv = to_argv(spec)
    for name in environment_names():
        monkeypatch.setenv(name, "/elsewhere")
    assert spec_values(from_argv(argv).spec) == spec_values(spec)
    assert from_argv(argv).spec.data_dir is None


def test_an_ssh_hosts_option_variables_cannot_change_the_remote_run() -> None:
    import shlex

    from evalsweep.compute._ssh import SSHTarget

    target = SSHTarget(name="box", host="box.invalid", env={"HF_HOME": "/cache"})
    words = shlex.split(target._evalsweep(["run", *SweepJob(SweepSpec(["-a"], [TASK])).run_args]))
    assert words[0] == "env"
    unset = {words[i + 1] for i, word in enumerate(words) if word == "-u"}
    assert unset == set(environment_names())
    assert "HF_HOME=/cache" in words
    assert words[-2:] == ["--", "-a"]


# -- the MCP side -----------------------------------------------------------------------


def quotes_in(store_path: Path) -> int:
    with sqlite3.connect(store_path) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM agent_quotes").fetchone()[0])
        except sqlite3.OperationalError:  # no agent tables yet: nothing quoted
            return 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    "extra",
    [
        {"apply_chat_template": True},
        {"temperature": 0.7},
        {"system_instruction": "Answer A."},
        {"device": "cuda"},
        {"data_dir": "/elsewhere"},
        {"backend": "vllm"},
        {"Limit": 2},  # not limit
    ],
    ids=lambda e: next(iter(e)),
)
async def test_a_parameter_the_tool_does_not_take_is_refused_not_dropped(
    agent_env: Path, store_path: Path, gpt2_a: Path, extra: dict[str, Any]
) -> None:
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 2, **extra}
    async with Client(build_server(store_path, config={})) as client:
        schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}
        call = await client.call_tool("quote_sweep", args)
        start = await client.call_tool("start_sweep", {"quote_id": "q-0123456789", **extra})
    assert call.is_error and start.is_error
    sent = next(iter(extra))
    text = call.content[0].text
    taken = "checkpoints, every, gpu, last, limit, num_fewshot, steps, target, tasks"
    assert f"the tool does not take it (it takes: {taken})" in text
    # A word of evalsweep's own is named back; any other name could be a guess at a secret.
    assert (repr(sent) in text) == (sent != "Limit"), text
    assert quotes_in(store_path) == 0
    for name in ("quote_sweep", "start_sweep", "job_logs"):
        assert schema[name].get("additionalProperties") is False, name


@pytest.mark.anyio
@pytest.mark.parametrize(
    "sent",
    [{"limit": True}, {"limit": 2.5}, {"num_fewshot": 1.0}, {"num_fewshot": False},
     {"limit": "true"}, {"gpu": 0}],
    ids=lambda e: f"{next(iter(e))}={next(iter(e.values()))!r}",
)  # fmt: skip
async def test_an_agents_number_is_not_coerced_from_another_type(
    agent_env: Path, store_path: Path, gpt2_a: Path, sent: dict[str, Any]
) -> None:
    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], **sent}
    async with Client(build_server(store_path, config={})) as client:
        call = await client.call_tool("quote_sweep", args)
    assert call.is_error, call.structured_content
    assert quotes_in(store_path) == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    "file_name", ["cap,itals.yaml", "\u2028capitals.yaml", "\u00a0capitals.yaml", " capitals.yaml"]
)
async def test_a_task_file_no_job_command_can_name_is_refused_before_quoting(
    agent_env: Path,
    store_path: Path,
    gpt2_a: Path,
    tmp_path: Path,
    file_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "capitals.jsonl").write_text(
        json.dumps({"country": "France", "choices": ["Paris", "Lyon"], "answer": 0}) + "\n"
    )
    text = (
        "task: capitals\ndata: capitals.jsonl\n"
        'doc_to_text: "Q: capital of {{country}}?\\nA:"\n'
        "doc_to_choice: choices\ndoc_to_target: answer\nnum_fewshot: 0\n"
    )
    (folder / file_name).write_text(text)
    (folder / "capitals.yaml").write_text(text)  # what a stripped name would find
    monkeypatch.chdir(folder)  # named relative: a stripped name would be capitals.yaml
    args = {"checkpoints": [str(gpt2_a)], "tasks": [file_name], "gpu": "cpu"}
    async with Client(build_server(store_path, config={})) as client:
        call = await client.call_tool("quote_sweep", args)
    assert call.is_error, call.structured_content
    assert "tasks[0]" in call.content[0].text
    assert quotes_in(store_path) == 0


@pytest.mark.anyio
async def test_the_quote_prices_the_spec_the_job_process_reads(
    agent_env: Path,
    store_path: Path,
    gpt2_a: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from evalsweep.agent._estimate import plan_work

    args = {"checkpoints": [str(gpt2_a)], "tasks": [TASK], "limit": 2, "num_fewshot": 1,
            "gpu": "cpu"}  # fmt: skip
    async with Client(build_server(store_path, config={})) as client:
        quote = await client.call_tool("quote_sweep", args)
    assert not quote.is_error, quote.content[0].text
    with Store(store_path) as store:  # the quote as the job is started from (with its hash)
        params = load_quote(store, quote.structured_content["quote_id"]).params
    command = job_command(params, "local", store_path, tmp_path / "out", params["data_dir"])
    assert command[:4] == [sys.executable, "-m", "evalsweep", "run"]
    # The job process reads its words in an environment without this machine's settings.
    for name in environment_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in words_only_environment({"EVALSWEEP_TARGET": "ssh://x"}).items():
        monkeypatch.setenv(name, value)
    parsed = parse_run(command[4:])
    assert parsed["target"] == "local"
    job = build_spec(parsed.pop("checkpoints"), parsed)
    # The job's spec is the quote's, and it pins the approved identities.
    assert job.expect_identities == " ".join(params["identities"])
    assert job.expect_work == params["work_hash"]
    plain = replace(job, expect_identities=None, expect_work=None)
    assert spec_values(plain) == spec_values(quoted_spec(params))
    assert job.options.device == "cpu" and (job.limit, job.num_fewshot) == (2, 1)
    work = plan_work(
        list(job.checkpoints), [str(t) for t in job.tasks], data_dir=job.data_dir,
        device=job.options.device, limit=job.limit, num_fewshot=job.num_fewshot,
    )  # fmt: skip
    priced = quote.structured_content
    assert (work.requests, work.prompt_tokens) == (priced["requests"], priced["prompt_tokens"])
    assert work.max_generated_tokens == priced["max_generated_tokens"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "args", "named"),
    [
        ("quote_sweep", {"tasks": [TASK], "Limit": "sk-GUESSED-SECRET-0001"}, "an unknown arg"),
        ("quote_sweep", {"tasks": [TASK], "limit": "sk-GUESSED-SECRET-0001"}, "limit:"),
        ("quote_sweep", {"tasks": "sk-GUESSED-SECRET-0001"}, "tasks:"),
        ("quote_sweep", {"tasks": [TASK], "k" * 5000 + "sk-GUESSED-SECRET-0001": 1}, "an unknown"),
        ("start_sweep", {"quote_id": ["sk-GUESSED-SECRET-0001"]}, "quote_id:"),
        ("job_logs", {"job_id": {"sk-GUESSED-SECRET-0001": 1}}, "job_id:"),
        ("job_logs", {"job_id": "j-0", "max_bytes": "sk-GUESSED-SECRET-0001"}, "max_bytes:"),
    ],
    ids=["unknown", "type", "list", "long-name", "quote-list", "job-object", "bytes"],
)
async def test_arguments_the_schema_refuses_are_one_line_naming_them_never_their_values(
    agent_env: Path, store_path: Path, gpt2_a: Path, tool: str, args: dict[str, Any], named: str
) -> None:
    if tool == "quote_sweep":
        args = {"checkpoints": [str(gpt2_a)], **args}
    async with Client(build_server(store_path, config={})) as client:
        call = await client.call_tool(tool, args)
    assert call.is_error
    text = call.content[0].text
    assert text.startswith(f"{tool}: ") and "\n" not in text and len(text) < 400, text
    assert named in text, text
    assert "GUESSED" not in text and "validation error" not in text, text
    assert quotes_in(store_path) == 0

"""One definition of a sweep's options: flags, spec, remote and job argv, and the MCP schema.

Every option of ``evalsweep run`` is an entry of ``evalsweep.options.OPTIONS``; these
tests hold the table to the objects it fills (``SweepSpec``, ``BackendOptions``,
``ChatOptions``, the code tasks), to the cache key's classification, and hold every
command line written from a spec (remote runs, agent jobs) to what click reads back.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from mcp import Client

from evalsweep.agent import build_server
from evalsweep.agent._jobs import job_command
from evalsweep.agent._options import CORE_PARAMETERS, quoted_spec
from evalsweep.agent._quotes import load_quote
from evalsweep.cli import main
from evalsweep.compute import SweepJob
from evalsweep.engine import OPTION_ROLES, ChatOptions, SweepSpec
from evalsweep.engine._cache_key import SPEC_ROLES
from evalsweep.errors import ConfigError
from evalsweep.models import BackendOptions
from evalsweep.options import (
    OPTIONS,
    Option,
    agent_options,
    build_spec,
    from_argv,
    spec_values,
    task_list,
    to_argv,
)
from evalsweep.store import Store
from evalsweep.tasks import MMLU
from evalsweep.tasks._code import CodeTask

TASK = "mmlu_abstract_algebra"
#: Values for options whose values are names, not free text.
NAMED = {
    "tasks": "mmlu,gsm8k",
    "backend": "vllm",
    "device": "cpu",
    "dtype": "bfloat16",
    "data_dir": "some/data",
}
#: What an option needs beside it to take effect: code sampling needs a code task (and
#: several samples need a temperature); multi-turn few-shot needs a chat template.
COMPANIONS: dict[str, dict[str, Any]] = {
    "code": {"tasks": "humaneval,mmlu", "samples_per_problem": 10, "temperature": 0.8},
    "fewshot_as_multiturn": {"apply_chat_template": True},
}
TRAVELING = [o for o in OPTIONS if o.travels]
#: The dataclass each land fills, beside the fields that hold other lands.
LANDS = {"spec": SweepSpec, "backend": BackendOptions, "chat": ChatOptions}


def other_value(option: Option) -> Any:
    """A valid value of ``option`` that is not its default, chosen from its declared kind."""
    if option.name in NAMED:
        return NAMED[option.name]
    default = option.default
    if option.kind == "switch" and default is None:  # None: implied by another option
        return False
    if option.kind in ("flag", "switch"):
        return not default
    if option.kind in ("int", "batch"):
        return (default or 0) + 7
    if option.kind == "float":
        return (default or 0.0) + 0.25
    if option.kind == "ks":
        return (1, 5)
    if option.kind in ("text", "folder", "file"):
        return "a value"
    raise AssertionError(f"option {option.name}: no test value for kind {option.kind}")


def values_with(option: Option) -> dict[str, Any]:
    values: dict[str, Any] = {"tasks": TASK}
    values.update(COMPANIONS.get(option.lands, {}))
    values.update(COMPANIONS.get(option.name, {}))
    values[option.name] = other_value(option)
    return values


def field_default(cls: type, name: str) -> Any:
    (found,) = [f for f in fields(cls) if f.name == name]
    if found.default is not MISSING:
        return found.default
    return MISSING


# -- the table and the objects it fills -------------------------------------------------


@pytest.mark.parametrize("land", sorted(LANDS))
def test_every_field_of_the_spec_objects_has_one_option(land: str) -> None:
    composite = {"checkpoints", "options", "chat"} if land == "spec" else set()
    declared = [o.attribute for o in OPTIONS if o.lands == land]
    wanted = {f.name for f in fields(LANDS[land])} - composite
    assert len(declared) == len(set(declared)), f"two options fill one {land} field"
    missing = sorted(wanted - set(declared))
    assert not missing, f"add to evalsweep/options.py OPTIONS: {land} fields {missing}"
    assert set(declared) == wanted, "an option names a field that is gone"


def test_code_options_are_the_code_tasks_own_settings() -> None:
    parameters = inspect.signature(CodeTask.__init__).parameters
    for option in (o for o in OPTIONS if o.lands == "code"):
        assert option.attribute in parameters
        assert (
            tuple(parameters[option.attribute].default) == tuple(option.default)
            if (option.kind == "ks")
            else parameters[option.attribute].default == option.default
        )


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.lands in LANDS], ids=lambda o: o.name)
def test_an_options_default_is_its_fields_default(option: Option) -> None:
    default = field_default(LANDS[option.lands], option.attribute)
    if default is MISSING:  # a field every spec names (the tasks)
        assert option.required
        return
    if option.name == "fewshot_as_multiturn":  # None: follows --apply-chat-template
        assert ChatOptions.from_flags(False, option.default, None) == ChatOptions()
        return
    assert option.default == default


def test_every_option_that_fills_a_spec_is_classified_for_the_cache_key() -> None:
    for option in OPTIONS:
        if option.lands == "backend":
            assert option.attribute in OPTION_ROLES, f"classify {option.attribute} in OPTION_ROLES"
        if option.lands == "spec":
            assert option.attribute in SPEC_ROLES, f"classify {option.attribute} in SPEC_ROLES"
        # What changes the work travels to remote runs and jobs; nothing else does.
        # A run's checkpoints are chosen before the references travel.
        assert option.travels == (option.lands not in ("presentation", "selection")), option.name


def test_every_click_parameter_of_run_is_an_option() -> None:
    run = main.get_command(click.Context(main), "run")
    assert run is not None
    names = {p.name for p in run.params if p.expose_value} - {"checkpoints", "help"}
    assert names == {o.name for o in OPTIONS}


def test_run_help_lists_every_visible_flag_once() -> None:
    shown = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    for option in OPTIONS:
        flag = option.flag + (f" / {option.negative}" if option.kind == "switch" else "")
        assert (flag in shown.output) != option.hidden, option.flag
        assert (
            shown.output.count(f"{option.flag} ") + shown.output.count(f"{option.flag}\n") <= 2
        ), option.flag


# -- spec -> argv -> spec ---------------------------------------------------------------


@pytest.mark.parametrize("option", TRAVELING, ids=lambda o: o.name)
def test_a_non_default_value_survives_the_round_trip(option: Option) -> None:
    values = values_with(option)
    spec = build_spec(["org/a", "./b"], values)
    before = spec_values(spec)
    if option.name == "tasks":
        assert before["tasks"] == tuple(task_list(values["tasks"]))
    elif option.lands != "job":  # the baseline is the job's, beside the spec
        assert before[option.name] == values[option.name]
    argv = to_argv(spec, baseline=values.get("baseline"))
    read = from_argv(argv)
    assert spec_values(read.spec) == before
    assert list(read.spec.checkpoints) == ["org/a", "./b"]
    assert read.baseline == values.get("baseline")
    # `evalsweep run`'s own parser reads the same words as the same sweep.
    run = main.get_command(click.Context(main), "run")
    assert run is not None
    parsed = dict(run.make_context("run", list(argv)).params)
    assert spec_values(build_spec(parsed.pop("checkpoints"), parsed)) == before
    assert parsed["baseline"] == values.get("baseline")


def test_a_default_sweep_is_its_tasks_and_references() -> None:
    spec = SweepSpec(["-dash", "org/name"], [TASK])
    assert to_argv(spec) == ["--tasks", TASK, "--", "-dash", "org/name"]
    assert SweepJob(spec).run_args == tuple(to_argv(spec))


def test_written_arguments_are_read_as_words_not_from_this_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EVALSWEEP_DATA_DIR", "/somewhere/else")
    spec = SweepSpec(["a"], [TASK])
    assert from_argv(to_argv(spec)).spec.data_dir is None


@pytest.mark.parametrize("tasks", [["humaneval"], ["mbpp", "mmlu"]])
def test_a_code_task_named_in_a_spec_runs_with_its_default_sampling(tasks: list[str]) -> None:
    argv = to_argv(SweepSpec(["a"], tasks))
    (task, *_) = from_argv(argv).spec.tasks
    assert isinstance(task, CodeTask)
    assert (task.samples, task.temperature, task.ks) == (1, 0.0, (1,))


def test_a_spec_no_command_line_can_say_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'mmlu' is a Python object"):
        to_argv(SweepSpec(["a"], [MMLU()]))
    with pytest.raises(ConfigError, match="different sampling"):
        from evalsweep.tasks import MBPP, HumanEval

        to_argv(SweepSpec(["a"], [HumanEval(samples=2, temperature=0.5), MBPP()]))


@pytest.mark.parametrize("tasks", [["a,b.yaml"], ["mmlu", " "], ["mmlu", ""]])
def test_task_names_no_command_line_reads_back_are_refused(tasks: list[str]) -> None:
    with pytest.raises(ConfigError, match="cannot be written as evalsweep run arguments"):
        to_argv(SweepSpec(["a"], tasks))


def test_arguments_run_refuses_are_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="--batch-size"):
        from_argv(["--tasks", TASK, "--batch-size", "0", "--", "a"])
    with pytest.raises(ConfigError, match="--store"):
        from_argv(["--tasks", TASK, "--store", "s.sqlite", "--", "a"])  # not a sweep's option


# -- agents -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_mcp_schemas_list_exactly_the_exposed_options(
    agent_env: Path, store_path: Path
) -> None:
    exposed = {o.agent: o for o in agent_options()}
    async with Client(build_server(store_path, config={})) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    quote = tools["quote_sweep"].input_schema["properties"]
    assert set(quote) == set(CORE_PARAMETERS) | set(exposed)
    for name, option in exposed.items():
        assert quote[name]["description"] == option.agent_help
    start = tools["start_sweep"].input_schema["properties"]
    assert set(start) - {"quote_id", "consent"} == set(CORE_PARAMETERS) | set(exposed)


@pytest.mark.anyio
async def test_a_jobs_command_is_the_quoted_sweep_written_by_to_argv(
    agent_env: Path, store_path: Path, gpt2_a: Path, data_dir: Path, tmp_path: Path
) -> None:
    args = {
        "checkpoints": [str(gpt2_a)], "tasks": [TASK, "arc_easy"], "gpu": "cpu", "limit": 3,
        "num_fewshot": 2,
    }  # fmt: skip
    async with Client(build_server(store_path, config={})) as client:
        call = await client.call_tool("quote_sweep", args)
    assert not call.is_error, call.content[0].text
    with Store(store_path) as store:  # the quote as the job is started from (with its hash)
        params = load_quote(store, call.structured_content["quote_id"]).params
    # The job also refuses checkpoints that no longer resolve to the approved identities.
    spec = replace(
        quoted_spec(params),
        expect_identities=" ".join(params["identities"]),
        expect_work=params["work_hash"],
    )
    command = job_command(params, "local", store_path, tmp_path / "out", params["data_dir"])
    assert command[:4] == [sys.executable, "-m", "evalsweep", "run"]
    written = to_argv(spec)
    assert written[written.index("--expect-identities") + 1] == params["identities"][0]
    assert command[-len(written) :] == written
    assert written[-2:] == ["--", str(gpt2_a)]  # references after --
    read = from_argv(written).spec
    assert (read.options.device, read.limit, read.num_fewshot) == ("cpu", 3, 2)
    assert read.data_dir == str(data_dir) and list(read.tasks) == [TASK, "arc_easy"]
    assert spec_values(read) == spec_values(spec)


def _commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
        found += _commands(command) if isinstance(command, click.Group) else [command]
    return found


@pytest.mark.parametrize("name", ["store", "debug", "tasks", "num_fewshot", "baseline"])
def test_an_option_several_commands_take_is_declared_once(name: str) -> None:
    definition = next(o for o in OPTIONS if o.name == name)
    taking = [
        (command.name, param)
        for command in _commands(main)
        for param in command.params
        if isinstance(param, click.Option) and param.name == name
    ]
    assert len(taking) >= 3, f"{name}: fewer commands than expected take it"
    for command, param in taking:
        assert param.opts[0] == definition.flag, command
        assert param.envvar == definition.envvar, command
        assert param.is_flag == (definition.kind == "flag"), command

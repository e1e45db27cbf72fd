"""A quote's parameters as a sweep: the MCP parameters and the job's spec, from one table.

The options an agent may set are those :data:`evalsweep.options.OPTIONS` marks with an
``agent`` name; ``quote_sweep`` and ``start_sweep`` take exactly those (beside the
checkpoints, tasks and target), with the description, type and bounds the table
gives. A quote keeps each option's value under the option's own name, and
:func:`quoted_spec` turns a quote's parameters into the :class:`SweepSpec` that is
priced and that the job runs (``job_command`` writes it with ``to_argv``), so what
runs is what was quoted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from evalsweep.agent._inputs import InputError
from evalsweep.options import (
    Option,
    agent_options,
    build_spec,
    from_argv,
    number_problem,
    tasks_value,
    text_problem,
    to_argv,
)

if TYPE_CHECKING:
    from evalsweep.engine import SweepSpec

#: The MCP parameters every sweep quote has, beside the options of ``agent_options()``.
CORE_PARAMETERS = ("checkpoints", "tasks", "target")
_TYPES: Mapping[str, Any] = {"int": int, "float": float, "text": str}


def agent_option(parameter: str) -> Option:
    """The option an agent sets with the MCP parameter ``parameter``."""
    (found,) = [each for each in agent_options() if each.agent == parameter]
    return found


def annotation(parameter: str) -> Any:
    """The MCP parameter's type and description, as the tool's schema shows them."""
    each = agent_option(parameter)
    kind = _TYPES[each.kind]
    # Strict: true is not a limit of 1, nor 2.5 a few-shot count of 2 (the value priced
    # and run is the value sent, or the call is refused).
    return Annotated[kind | None, Field(description=each.agent_help, strict=True)]


def restated(parameter: str) -> Any:
    """``start_sweep``'s optional copy of a quoted parameter: equal to the quote's, or refused."""
    each = agent_option(parameter)
    kind = _TYPES[each.kind]
    description = f"Optional: must equal the quote's {parameter}, else refused"
    return Annotated[kind | None, Field(description=description, strict=True)]


def check_bounds(values: Mapping[str, Any]) -> None:
    """Refuse an agent's number outside the bounds its option declares, or a text that is
    not of the form it declares (named, not echoed); the same checks as the command line's
    (:func:`evalsweep.options.number_problem`, :func:`evalsweep.options.text_problem`)."""
    for each in agent_options():
        value = values.get(each.agent or "")
        problem = number_problem(each, value, agent=True) or text_problem(each, value)
        if problem:
            raise InputError(f"{each.agent} {problem}")


def quoted_spec(params: Mapping[str, Any]) -> SweepSpec:
    """The sweep a quote's parameters describe, as the job reads it: the spec is written
    as the job's ``evalsweep run`` words and read back, so what is priced is what the job
    parses, and a quote no job command can say is refused before it exists.

    ``params`` holds ``checkpoints``, ``tasks`` (a list), ``data_dir`` and each agent
    option's value under the option's name (``device``, ``limit``, ``num_fewshot``).

    Raises:
        ConfigError: a task name, reference or value no command line carries as it is.
    """
    values: dict[str, Any] = {
        "tasks": tasks_value(list(params["tasks"])),
        "data_dir": params["data_dir"],
    }
    for each in agent_options():
        values[each.name] = params.get(each.name, each.default)
    spec = build_spec(list(params["checkpoints"]), values)
    return from_argv(to_argv(spec)).spec


def with_agent_options(fn: Callable[..., Any], *, restate: bool = False) -> Callable[..., Any]:
    """``fn`` (which takes the agent options as ``**options``) with a signature that names
    each of them, so the MCP tool's schema lists exactly the options agents may set.

    Args:
        fn: the tool; its ``**options`` parameter is replaced by one keyword
            parameter per agent option (default ``None``).
        restate: the parameters are ``start_sweep``'s optional copies of the quote's.
    """
    signature = inspect.signature(fn)
    kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    make = restated if restate else annotation
    added = [
        inspect.Parameter(
            each.agent or "",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=make(each.agent or ""),
        )
        for each in agent_options()
    ]
    fn.__signature__ = signature.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    return fn

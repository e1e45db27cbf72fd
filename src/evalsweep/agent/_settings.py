"""The person's rules for the agent, read from their configuration file.

Limits, approval rules, rates, throughput figures, the folders whose task files agents
may name and the folders whose training runs they may name come only from the
configuration (``[limits]``, ``[approval]``, ``[rates]``, ``[throughput]``, ``[agent]``),
which evalsweep never writes; no MCP tool can change them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsweep.agent._ledger import Limits
from evalsweep.config import load_config, section
from evalsweep.errors import ConfigError

#: No tool result is ever larger than this, whatever the configuration says.
HARD_RESULT_CAP = 1_000_000

#: Tokens per second of a 1-billion-parameter model, by hardware kind, used until a
#: finished job on the target has measured its own. cpu: measured by
#: benchmarks/agent_estimate.py on a shared 2-CPU VM (50-62); cuda: not measured here
#: (no GPU was available), a rough figure for one H100-class GPU in bf16.
DEFAULT_THROUGHPUT = {"cpu": 60.0, "cuda": 40_000.0}


@dataclass(frozen=True)
class AgentSettings:
    """What the server enforces; built once from the configuration."""

    per_connection_usd: float = 0.0
    global_usd: float = 0.0
    global_window_days: float = 30.0
    max_job_hours: float = 24.0
    max_result_bytes: int = HARD_RESULT_CAP
    approve_local: bool = False
    trust_elicitation: bool = True
    quote_ttl_s: float = 900.0
    watchdog_interval_s: float = 5.0
    rates: dict[str, float] = field(default_factory=dict)
    throughput: dict[str, float] = field(default_factory=dict)
    task_dirs: tuple[Path, ...] = ()
    run_dirs: tuple[Path, ...] = ()

    @classmethod
    def from_config(cls, config: dict[str, Any] | None = None) -> AgentSettings:
        config = load_config() if config is None else config
        limits = section(config, "limits")
        approval = section(config, "approval")
        rates = section(config, "rates")
        throughput = section(config, "throughput")
        agent = section(config, "agent")
        return cls(
            per_connection_usd=_number(limits, "per_connection_usd", 0.0, "limits"),
            global_usd=_number(limits, "global_usd", 0.0, "limits"),
            global_window_days=_number(limits, "global_window_days", 30.0, "limits"),
            max_job_hours=min(_number(limits, "max_job_hours", 24.0, "limits"), 24.0),
            max_result_bytes=int(
                min(_number(limits, "max_result_bytes", HARD_RESULT_CAP, "limits"), HARD_RESULT_CAP)
            ),
            approve_local=_flag(approval, "local", False),
            trust_elicitation=_flag(approval, "elicitation", True),
            quote_ttl_s=_number(approval, "quote_ttl_s", 900.0, "approval"),
            watchdog_interval_s=_number(limits, "watchdog_interval_s", 5.0, "limits"),
            rates={str(k): _number(rates, k, 0.0, "rates") for k in rates},
            throughput={str(k): _number(throughput, k, 0.0, "throughput") for k in throughput},
            task_dirs=_folders(agent, "task_dirs"),
            run_dirs=_folders(agent, "run_dirs"),
        )

    def ledger_limits(self) -> Limits:
        return Limits(
            self.per_connection_usd, self.global_usd, self.global_window_days, self.max_job_hours
        )

    def limits(self) -> dict[str, float]:
        return {
            "per_connection_usd": self.per_connection_usd,
            "global_usd": self.global_usd,
            "global_window_days": self.global_window_days,
            "max_job_hours": self.max_job_hours,
        }


def _number(table: dict[str, Any], key: str, default: float, name: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"[{name}] {key} must be a number of 0 or more, got {value!r}")
    return float(value)


def _flag(table: dict[str, Any], key: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"[approval] {key} must be true or false, got {value!r}")
    return value


def _folders(table: dict[str, Any], key: str) -> tuple[Path, ...]:
    """``[agent] key``: a list of absolute paths of existing folders, as their real paths."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[agent] {key} must be a list of folder paths")
    folders = []
    for each in value:
        path = Path(each).expanduser()
        if not path.is_absolute() or not path.is_dir():
            raise ConfigError(f"[agent] {key}: {each!r} is not the absolute path of a folder")
        folders.append(path.resolve())
    return tuple(folders)

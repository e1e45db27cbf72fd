"""Secrets: encrypted at rest, named only, redacted from a job's log by its supervisor."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.errors import ConfigError
from evalsweep.secrets import SecretBox
from evalsweep.store import Store


def test_cli_stores_secrets_encrypted_and_lists_only_names(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    value = "hf_" + secrets.token_hex(16)
    env = {**cli_env, "EVALSWEEP_CONFIG": str(tmp_path / "conf" / "config.toml")}
    cli = [sys.executable, "-m", "evalsweep", "secrets"]
    subprocess.run([*cli, "set", "HF_TOKEN"], input=value + "\n", text=True, env=env, check=True,
                   capture_output=True)  # fmt: skip
    listed = subprocess.run([*cli, "list", "--json"], env=env, capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert json.loads(listed.stdout) == ["HF_TOKEN"] and value not in listed.stdout
    stored = (tmp_path / "conf" / "secrets.json").read_text()
    assert value not in stored and "HF_TOKEN" in stored
    assert (tmp_path / "conf" / "secrets.key").stat().st_mode & 0o777 == 0o600
    assert SecretBox(tmp_path / "conf").environment() == {"HF_TOKEN": value}
    subprocess.run([*cli, "remove", "HF_TOKEN"], env=env, check=True, capture_output=True)
    missing = subprocess.run([*cli, "remove", "HF_TOKEN"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "no secret named 'HF_TOKEN'" in missing.stderr
    assert SecretBox(tmp_path / "conf").names() == []


def test_redaction_and_refusals(tmp_path: Path) -> None:
    box = SecretBox(tmp_path)
    box.set("JUDGE_KEY", "sk-judge-123456")
    assert box.redact("key=sk-judge-123456.") == "key=[secret JUDGE_KEY]."
    with pytest.raises(ConfigError, match="must look like an environment variable"):
        box.set("not a name", "abcdefgh")
    with pytest.raises(ConfigError, match="6\\+ characters"):
        box.set("SHORT", "abc")
    os.chmod(box.key_path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        SecretBox(tmp_path).set("OTHER", "abcdefgh")


def test_supervisor_redacts_a_secret_the_job_prints(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str]
) -> None:
    value = "canary-" + secrets.token_hex(8)
    log = tmp_path / "log.txt"
    with Store(store_path) as store:
        ensure_agent_tables(store)
        entry = store.audit_begin("command", "print the token", target="local")
    printer = "import os; print('token is', os.environ['HF_TOKEN']); print('done')"
    env = {**cli_env, "HF_TOKEN": value, "EVALSWEEP_REDACT_NAMES": "HF_TOKEN"}
    subprocess.run(
        [sys.executable, "-m", "evalsweep.agent._supervise", "--store", str(store_path),
         "--job", "j-test", "--log", str(log), "--audit", str(entry), "--deadline", "9e12",
         "--", sys.executable, "-c", printer],
        env=env, check=True, timeout=120,
    )  # fmt: skip
    text = log.read_text()
    assert "token is [secret HF_TOKEN]" in text and "done" in text and value not in text
    with Store(store_path) as store:
        (audited,) = store.audit_entries(kind="command")
    assert audited["exit_code"] == 0 and audited["output_bytes"] == log.stat().st_size

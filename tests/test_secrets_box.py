"""Secrets (``evalsweep.secrets``): encrypted at rest and written safely, named only, every
encoded form of a value redacted (tool results, a job's log, an ssh target's audit), and no
secret named as one of evalsweep's settings, wherever secrets go."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.errors import ConfigError
from evalsweep.secrets import SecretBox, check_secret_name, encoded_forms, redactor
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
    value = 'canary"-' + secrets.token_hex(8)
    log = tmp_path / "log.txt"
    with Store(store_path) as store:
        ensure_agent_tables(store)
        entry = store.audit_begin("command", "print the token", target="local")
    printer = (
        "import json, os, sys; print('token is', os.environ['HF_TOKEN']);"
        "print('as json', json.dumps(os.environ['HF_TOKEN'])); sys.stdout.flush();"
        "sys.stdout.buffer.write(b'raw \\xff\\xfe bytes\\n'); print('done')"
    )
    env = {**cli_env, "HF_TOKEN": value, "EVALSWEEP_REDACT_NAMES": "HF_TOKEN"}
    subprocess.run(
        [sys.executable, "-m", "evalsweep.agent._supervise", "--store", str(store_path),
         "--job", "j-test", "--log", str(log), "--audit", str(entry), "--deadline", "9e12",
         "--", sys.executable, "-c", printer],
        env=env, check=True, timeout=120,
    )  # fmt: skip
    raw = log.read_bytes()
    assert b"raw \xff\xfe bytes\n" in raw  # not UTF-8: through unchanged
    text = raw.decode("utf-8", "replace")
    assert "token is [secret HF_TOKEN]" in text and 'as json "[secret HF_TOKEN]"' in text
    assert "done" in text and value not in text and value.replace('"', '\\"') not in text
    with Store(store_path) as store:
        (audited,) = store.audit_entries(kind="command")
    assert audited["exit_code"] == 0 and audited["output_bytes"] == log.stat().st_size


def test_files_are_0600_under_any_umask_and_never_written_through_a_link(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("{}")  # read as no secrets through the link; never written
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "secrets.tmp").symlink_to(victim)  # the name an earlier release wrote through
    (conf / "secrets.json").symlink_to(victim)  # a link at the final name: replaced
    old = os.umask(0)
    try:
        SecretBox(conf).set("HF_TOKEN", "hf_abcdefgh")
    finally:
        os.umask(old)
    assert victim.read_text() == "{}"
    for name in ("secrets.json", "secrets.key"):
        info = os.lstat(conf / name)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, name
    assert sorted(p.name for p in conf.iterdir()) == ["secrets.json", "secrets.key", "secrets.tmp"]
    assert SecretBox(conf).environment() == {"HF_TOKEN": "hf_abcdefgh"}


def test_a_key_that_is_a_dangling_link_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "secrets.key").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=r"^cannot read the secret key .*secrets\.key \("):
        SecretBox(tmp_path).set("HF_TOKEN", "hf_abcdefgh")
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secrets.key"]


def test_one_redaction_masks_every_encoded_form() -> None:
    value = 'sk-"quoted"\\path é\tend'
    redact = redactor({"JUDGE_KEY": value, "HF_TOKEN": "hf_short1"})
    for form in encoded_forms(value):
        assert redact(f"<{form}>") == "<[secret JUDGE_KEY]>", form
    echoed = json.dumps({"error": f"bad key {value}"}) + repr(value) + "hf_short1"
    masked = redact(echoed)
    assert "quoted" not in masked and "hf_short1" not in masked
    assert masked.count("[secret JUDGE_KEY]") == 2 and masked.endswith("[secret HF_TOKEN]")
    assert redactor({})("nothing to hide") == "nothing to hide"


def test_the_ssh_target_masks_what_the_box_masks() -> None:
    from evalsweep.compute._ssh import _redactor

    value = 'tok"en-123456'
    redact = _redactor({"HF_TOKEN": value})
    assert redact is not None and _redactor({}) is None
    assert redact(json.dumps({"env": value})) == '{"env": "[secret HF_TOKEN]"}'


def test_no_secret_is_named_as_a_setting_of_evalsweep(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    from evalsweep.options import words_only_environment

    refusal = "EVALSWEEP_\\* variables are evalsweep's settings, not secrets"
    with pytest.raises(ConfigError, match=f"^secret name 'EVALSWEEP_DATA_DIR': {refusal}"):
        SecretBox(tmp_path).set("EVALSWEEP_DATA_DIR", "/elsewhere/data")
    assert not (tmp_path / "secrets.json").exists()
    with pytest.raises(ConfigError, match=f"^somewhere 'EVALSWEEP_X': {refusal}"):
        check_secret_name("EVALSWEEP_X", "somewhere")
    check_secret_name("HF_TOKEN", "somewhere")
    kept = words_only_environment({"PATH": "/bin"}, {"HF_TOKEN": "v" * 8, "EVALSWEEP_X": "w"})
    assert kept == {"PATH": "/bin", "HF_TOKEN": "v" * 8}
    sent = json.dumps({"HF_TOKEN": "hf_abcdefgh", "EVALSWEEP_DATA_DIR": "/elsewhere"})
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "run", "--env-stdin", "--tasks", "mmlu",
         "--store", str(tmp_path / "s.sqlite"), str(tmp_path)],
        input=sent + "\n", env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        "evalsweep: error: --env-stdin: secret 'EVALSWEEP_DATA_DIR': EVALSWEEP_* variables "
        "are evalsweep's settings, not secrets (what runs would differ from what its words "
        "say); choose another name"
    ]
    assert not (tmp_path / "s.sqlite").exists()

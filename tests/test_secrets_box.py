"""Secrets (``evalsweep.secrets``): encrypted at rest and written safely, named only, every
encoded form of a value redacted (tool results, a job's log, an ssh target's audit), and no
secret named as one of evalsweep's settings, wherever secrets go."""

from __future__ import annotations

import json
import os
import re
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
    with pytest.raises(ConfigError, match="6 to 4096 of the characters"):
        box.set("SHORT", "abc")
    os.chmod(box.key_path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        SecretBox(tmp_path).set("OTHER", "abcdefgh")


def test_supervisor_redacts_a_secret_the_job_prints(
    tmp_path: Path, store_path: Path, cli_env: dict[str, str]
) -> None:
    value = "canary/-" + secrets.token_hex(8)
    log = tmp_path / "log.txt"
    with Store(store_path) as store:
        ensure_agent_tables(store)
        entry = store.audit_begin("command", "print the token", target="local")
    printer = (
        "import json, os, sys; print('token is', os.environ['HF_TOKEN']);"
        "print('as json', json.dumps(os.environ['HF_TOKEN'])); sys.stdout.flush();"
        "p = '@evalsweep-progress ';"
        "print(p + json.dumps({'event': 'start', 'label': os.environ['HF_TOKEN'], 'total': 2}));"
        "print(p + json.dumps({'event': 'start', 'label': 'x', 'total': os.environ['HF_TOKEN']}));"
        "print(p + json.dumps({'event': 'note', 'message': os.environ['HF_TOKEN'][::1]}));"
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
    assert "done" in text and value not in text and value.replace("/", "\\/") not in text
    assert "progress: [secret HF_TOKEN] 0/2 requests" in text and "Traceback" not in text
    with Store(store_path) as store:
        (audited,) = store.audit_entries(kind="command")
    assert audited["exit_code"] == 0 and audited["output_bytes"] == log.stat().st_size


def test_files_are_0600_under_any_umask_and_never_written_through_a_link(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("{}")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "secrets.tmp").symlink_to(victim)  # the name an earlier release wrote through
    old = os.umask(0)
    try:
        SecretBox(conf).set("HF_TOKEN", "hf_abcdefgh")
    finally:
        os.umask(old)
    assert victim.read_text() == "{}"
    for name in ("secrets.json", "secrets.key", "secrets.lock"):
        info = os.lstat(conf / name)
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, name
    assert sorted(p.name for p in conf.iterdir()) == [
        "secrets.json", "secrets.key", "secrets.lock", "secrets.tmp"
    ]  # fmt: skip
    assert SecretBox(conf).environment() == {"HF_TOKEN": "hf_abcdefgh"}
    # A link planted at the secrets file itself is never read nor written through.
    (conf / "secrets.json").unlink()
    (conf / "secrets.json").symlink_to(victim)
    with pytest.raises(ConfigError, match=r"secrets\.json cannot be opened \("):
        SecretBox(conf).set("OTHER", "abcdefgh")
    assert victim.read_text() == "{}"


def test_a_directory_created_under_umask_0_is_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        SecretBox(tmp_path / "new" / "conf").set("HF_TOKEN", "hf_abcdefgh")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "conf").stat().st_mode) == 0o700


def test_a_directory_others_can_write_to_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    SecretBox(conf).set("HF_TOKEN", "hf_abcdefgh")
    conf.chmod(0o777)  # another user could swap the files in it
    for use in (lambda b: b.environment(), lambda b: b.set("B", "abcdefgh"), SecretBox.names):
        with pytest.raises(ConfigError, match="others can write to it"):
            use(SecretBox(conf))
    # With nothing stored in it, such a folder is only a folder without secrets.
    bare = tmp_path / "bare"
    bare.mkdir(mode=0o777)
    bare.chmod(0o777)
    assert SecretBox(bare).environment() == {} and SecretBox(bare).redact("x") == "x"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to give a file to another user")
@pytest.mark.parametrize("name", ["secrets.json", "secrets.key"])
def test_a_file_of_another_user_is_never_used(tmp_path: Path, name: str) -> None:
    conf = tmp_path / "conf"
    SecretBox(conf).set("HF_TOKEN", "hf_abcdefgh")
    os.chown(conf / name, 65534, 65534)  # as if another user had placed it
    with pytest.raises(ConfigError, match="is not a regular file of yours"):
        SecretBox(conf).environment()


def test_two_writers_at_once_both_land(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    SecretBox(conf).set("SEED", "seed-value-1")
    script = (
        "import sys; from pathlib import Path; from evalsweep.secrets import SecretBox; "
        "SecretBox(Path(sys.argv[1])).set(sys.argv[2], 'value-' + sys.argv[2])"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(conf), f"S{i}"]) for i in range(8)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0] * 8
    assert SecretBox(conf).names() == sorted(["SEED", *(f"S{i}" for i in range(8))])


@pytest.mark.parametrize(
    "value",
    ["abc", "x" * 4097, "has space1", "quote'd-123", 'dq"uote-123', "back\\slash1",
     "nul\x00byte1", "caf\u00e9-token", "tab\tvalue1", "new\nline-12", "e     ", "pa%2Fss-12"],
)  # fmt: skip
def test_a_value_must_be_a_token_and_the_refusal_never_shows_it(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        SecretBox(tmp_path).set("TOKEN", value)
    assert str(refused.value) == (
        "secret TOKEN: the value must be 6 to 4096 of the characters A-Z a-z 0-9 . _ ~ + / = - "
        "(a token: every log and message writes such a value as it is, so it is always masked)"
    )
    assert not (tmp_path / "secrets.json").exists()


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"A": 1}', '{"1A": "x"}', '{"A=B": "x"}', '{"EVALSWEEP_STORE": "x"}',
     '{"TRAIL\\n": "x"}', "[" * 100000, "\udcff", '{"A": "' + "9" * 5000 + '"', "{"],
)  # fmt: skip
def test_a_malformed_secrets_file_is_one_line(tmp_path: Path, text: str) -> None:
    SecretBox(tmp_path).set("HF_TOKEN", "hf_abcdefgh")
    (tmp_path / "secrets.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError) as refused:
        SecretBox(tmp_path).environment()
    assert "\n" not in str(refused.value) and "secrets.json" in str(refused.value)


@pytest.mark.parametrize("key", [b"", b"not a key", b"\xff" * 44])
def test_a_malformed_key_is_one_line(tmp_path: Path, key: bytes) -> None:
    SecretBox(tmp_path).set("HF_TOKEN", "hf_abcdefgh")
    (tmp_path / "secrets.key").write_bytes(key)
    with pytest.raises(ConfigError, match=r"secrets\.key (is not a Fernet key|does not match)"):
        SecretBox(tmp_path).environment()


@pytest.mark.parametrize("name", ["TRAIL\n", "A=B", "", "NUL\x00", "ESC\x1b", "1A", "Ä"])
def test_a_name_that_is_not_a_variables_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="must look like an environment variable"):
        SecretBox(tmp_path).set(name, "abcdefgh")


def test_a_value_that_is_not_utf8_on_stdin_is_one_line(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "EVALSWEEP_CONFIG": str(tmp_path / "conf" / "config.toml")}
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "secrets", "set", "BADU"],
        input=b"abc\xffdefgh\n", env=env, capture_output=True,
    )  # fmt: skip
    assert ran.returncode == 2 and b"Traceback" not in ran.stderr
    assert ran.stderr.decode().count("\n") == 1 and b"secret BADU: the value must be" in ran.stderr


def test_one_redaction_masks_every_encoded_form() -> None:
    value = 'sk-"quoted"\\path é\tend'  # not a storable value: the forms still hold
    redact = redactor({"JUDGE_KEY": value, "HF_TOKEN": "hf_short1"})
    for form in encoded_forms(value):
        assert redact(f"<{form}>") == "<[secret JUDGE_KEY]>", form
    echoed = json.dumps({"error": f"bad key {value}"}) + repr(value) + "hf_short1"
    masked = redact(echoed)
    assert "quoted" not in masked and "hf_short1" not in masked
    assert masked.count("[secret JUDGE_KEY]") == 2 and masked.endswith("[secret HF_TOKEN]")
    assert redactor({})("nothing to hide") == "nothing to hide"


TOKEN = "sk-Ab9/+x=y~z_w.v-" + secrets.token_urlsafe(12)


def _encoders() -> dict[str, object]:
    import shlex
    from urllib.parse import quote, quote_plus

    from evalsweep.text import visible

    def url_lower(text: str) -> str:
        return re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(text, safe=""))

    def php_json(text: str) -> str:
        return json.dumps(text).replace("/", "\\/")

    return {
        "repr": repr, "ascii": ascii, "json": json.dumps, "json-utf8":
        lambda t: json.dumps(t, ensure_ascii=False), "json-\\/": php_json, "shell": shlex.quote,
        "url": lambda t: quote(t, safe=""), "url-lower": url_lower,
        "url-plus": quote_plus, "bytes": lambda t: repr(t.encode()), "visible": visible,
        "folded": lambda t: " ".join(t.split()), "str": str,
        "url-default": quote, "json-\\u-upper": lambda t: "".join(f"\\u{ord(c):04X}" for c in t),
        "json-\\u-some": lambda t: t.replace("+", "\\u002B").replace("S", "\\u0053"),
        "url-mixed": lambda t: t.replace("/", "%2f").replace("+", "%2B").replace("=", "%3d"),
    }  # fmt: skip


@pytest.mark.parametrize("encoder", sorted(_encoders()))
def test_a_token_is_masked_in_every_common_encoding_of_any_text_around_it(encoder: str) -> None:
    encode = _encoders()[encoder]
    redact = redactor({"JUDGE_KEY": TOKEN})
    for around in ("{}", 'it\'s "{}" here', "a\tb {}\n", "é {} ü", "{}{}"):
        shown = encode(around.format(TOKEN, TOKEN))  # type: ignore[operator]
        masked = redact(shown)
        assert "[secret JUDGE_KEY]" in masked, (encoder, shown)
        assert "sk-Ab9" not in masked and TOKEN[-12:] not in masked, (encoder, masked)


def test_every_command_a_target_runs_masks_every_stored_secret(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalsweep.compute._runner import CommandRunner

    monkeypatch.setenv("EVALSWEEP_CONFIG", str(tmp_path / "conf" / "config.toml"))
    SecretBox(tmp_path / "conf").set("NOT_SENT", "not-sent-0123456789")
    argv = [sys.executable, "-c", "print('not-sent-0123456789')"]
    with Store(store_path) as store:
        ran = CommandRunner(store, "box").run(argv)  # no secret given to this target
        (entry,) = store.audit_entries()
    assert ran.stdout == b"[secret NOT_SENT]\n"
    assert "not-sent-0123456789" not in json.dumps(entry)


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
        "evalsweep: error: --env-stdin: secret name 'EVALSWEEP_DATA_DIR': EVALSWEEP_* variables "
        "are evalsweep's settings, not secrets (what runs would differ from what its words "
        "say); choose another name"
    ]
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize(
    ("sent", "says"),
    [
        ("[" * 200000, "stdin is not a JSON object"),
        ('{"TOKEN": "nul\\u0000byte-1"}', "secret TOKEN: the value must be"),
        ('{"A=B": "abcdefgh"}', "must look like an environment variable"),
        ('{"": "abcdefgh"}', "must look like an environment variable"),
        ('{"TOKEN": "has space-1"}', "secret TOKEN: the value must be"),
    ],
)
def test_env_stdin_holds_names_and_values_to_the_secrets_rule(
    tmp_path: Path, cli_env: dict[str, str], sent: str, says: str
) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "run", "--env-stdin", "--tasks", "mmlu",
         "--store", str(tmp_path / "s.sqlite"), str(tmp_path)],
        input=sent + "\n", env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("evalsweep: error: --env-stdin: ") and says in line
    assert not (tmp_path / "s.sqlite").exists()


def test_overlapping_values_are_masked_together() -> None:
    redact = redactor({"A": "AAAAAAAA_B", "B": "_BCD999999"})
    assert redact("xAAAAAAAA_BCD999999y") == "x[secret A][secret B]y"
    assert redact("AAAAAAAA_BAAAAAAAA_B") == "[secret A][secret A]"


def test_a_secret_stored_after_a_runner_was_made_is_masked(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalsweep.compute._runner import CommandRunner

    monkeypatch.setenv("EVALSWEEP_CONFIG", str(tmp_path / "conf" / "config.toml"))
    with Store(store_path) as store:
        runner = CommandRunner(store, "box")
        plain = runner.run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'\\xff')"])
        SecretBox(tmp_path / "conf").set("LATER", "set-later-0123456789")
        ran = runner.run([sys.executable, "-c", "print('set-later-0123456789')"])
    assert plain.stdout == b"\xff"  # nothing stored then: output exactly as produced
    assert ran.stdout == b"[secret LATER]\n" and "set-later" not in ran.text


def test_a_fifo_planted_as_a_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    SecretBox(tmp_path).set("HF_TOKEN", "hf_abcdefgh")
    (tmp_path / "secrets.key").unlink()
    os.mkfifo(tmp_path / "secrets.key", 0o600)
    script = "import sys; from pathlib import Path; from evalsweep.secrets import SecretBox\n"
    script += "try:\n    SecretBox(Path(sys.argv[1])).environment()\n"
    script += "except Exception as exc:\n    print(exc)\n"
    ran = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert "secrets.key is not a regular file of yours" in ran.stdout, ran.stderr


def test_a_remote_progress_line_without_whole_numbers_is_dropped() -> None:
    from evalsweep.compute._stream import PREFIX, relay
    from evalsweep.engine import SilentProgress

    for fields in ({"event": "start", "label": "x", "total": "abc"}, {"event": "advance",
                   "count": -1}, [1, 2], {"event": "start", "total": 10**400}):  # fmt: skip
        relay(PREFIX + json.dumps(fields), SilentProgress())
    relay(PREFIX + "[" * 100000, SilentProgress())


def test_a_token_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    SecretBox(tmp_path).set("HF_TOKEN", "hf_abcdefgh")
    (tmp_path / "secrets.json").write_text('{"HF_TOKEN": "\\ud800"}')
    with pytest.raises(ConfigError, match="expected a JSON object of name -> token"):
        SecretBox(tmp_path).environment()


def test_a_change_of_mode_is_seen_by_a_box_already_in_use(tmp_path: Path) -> None:
    box = SecretBox(tmp_path)
    box.set("HF_TOKEN", "hf_abcdefgh")
    assert box.environment() == {"HF_TOKEN": "hf_abcdefgh"}  # read, and kept
    os.chmod(box.key_path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        box.environment()
    os.chmod(box.key_path, 0o600)
    tmp_path.chmod(0o777)
    with pytest.raises(ConfigError, match="others can write to it"):
        box.environment()


def test_every_escape_of_python_and_html_is_masked() -> None:
    import unicodedata

    value = "hf_Token-9.8/7+6=5~4"
    redact = redactor({"T": value})
    spellings = [
        "".join(f"&#x{ord(c):04X};" for c in value),
        "".join(f"&#{ord(c):03d};" for c in value),
        "".join(f"\\U{ord(c):08x}" for c in value),
        "".join(f"\\{ord(c):o}" for c in value),
        "".join(f"\\N{{{unicodedata.name(c)}}}" for c in value),
        value.replace("_", "&lowbar;").replace("+", "&plus;").replace("/", "&sol;"),
    ]
    for spelled in spellings:
        assert redact(f"<{spelled}>") == "<[secret T]>", spelled

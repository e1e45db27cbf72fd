"""Where the Ray cluster token comes from, how it is passed, and what a refusal says.

These parts need no cluster: a real secret store in a temporary folder, real
token files, and the exceptions Ray raises. The real head with token
authentication is in tests/test_codeeval_ray_head.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsweep.compute._ray_auth import (
    TokenEnvironment,
    answers,
    find_token,
    init_kwargs,
    ray_client_missing,
    refusal,
    reread_ray_settings,
)
from evalsweep.errors import ConfigError


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(tmp_path / "config.toml"))
    reread_ray_settings()  # Ray as a process that never had a token sees it
    yield tmp_path
    reread_ray_settings()  # and as it was again, for the tests after this one


def test_the_token_comes_from_the_secret_then_rays_own_conventions(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalsweep.secrets import SecretBox

    assert find_token(None) == (None, "none")
    (clean / ".ray").mkdir()
    (clean / ".ray" / "auth_token").write_text("home-token-123\n")
    assert find_token(None) == ("home-token-123", f"~/.ray/auth_token ({clean}/.ray/auth_token)")
    named = clean / "named"
    named.write_text("file-token-456")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert find_token(None) == ("file-token-456", f"RAY_AUTH_TOKEN_PATH ({named})")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token-789")
    assert find_token(None) == ("env-token-789", "RAY_AUTH_TOKEN")
    SecretBox().set("CLUSTER_TOKEN", "secret-token-000")
    assert find_token("CLUSTER_TOKEN") == ("secret-token-000", "evalsweep secret CLUSTER_TOKEN")
    with pytest.raises(ConfigError, match="no evalsweep secret named 'OTHER'"):
        find_token("OTHER")


def test_ray_client_gets_the_header_and_the_driver_the_environment_only_while_connecting(
    clean: Path,
) -> None:
    assert init_kwargs("ray://head:10001", "tok-123456") == {
        "_metadata": [("authorization", "Bearer tok-123456")]
    }
    assert init_kwargs("head:6379", "tok-123456") == {}
    assert init_kwargs("ray://head:10001", None) == {}
    with TokenEnvironment("tok-123456"):
        assert os.environ["RAY_AUTH_TOKEN"] == "tok-123456"
        assert os.environ["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_MODE" not in os.environ
    with TokenEnvironment(None):
        assert "RAY_AUTH_TOKEN" not in os.environ


def test_a_refusal_says_what_is_missing_and_never_the_token() -> None:
    from ray.exceptions import AuthenticationError

    missing = refusal(AuthenticationError("Authentication required"), "h:6379", "none")
    assert missing is not None and "requires token authentication and no token" in missing
    wrong = refusal(RuntimeError("UNAUTHENTICATED: invalid token"), "h:6379", "RAY_AUTH_TOKEN")
    assert wrong is not None
    assert wrong.startswith("the Ray cluster at h:6379 refused the token from RAY_AUTH_TOKEN")
    timeout = refusal(ConnectionError("ray client connection timeout"), "ray://h:10001", "none")
    assert timeout is not None and "token authentication" in timeout
    assert refusal(ConnectionError("connection refused"), "h:6379", "none") is None
    # What Ray 2.60's driver says when a token cluster turns it away, and nothing more.
    turned_away = refusal(ConnectionError("Failed to connect to Ray cluster at h:6379"),
                          "h:6379", "none")  # fmt: skip
    assert turned_away is not None and "give its token" in turned_away


def test_a_ray_client_address_without_ray_client_installed_is_named() -> None:
    import importlib.util

    message = ray_client_missing("ray://head:10001")
    if importlib.util.find_spec("grpc") is None:
        assert message is not None and "pip install 'ray[client]'" in message
    else:
        assert message is None
    assert ray_client_missing("head:6379") is None


def test_a_failed_connection_says_refused_token_or_nothing_there_by_whether_it_answers(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's driver says only "Failed to connect"; whether the address answers tells which."""
    failed = ConnectionError("Failed to connect to Ray cluster at h:6379")
    with_token = refusal(failed, "h:6379", "evalsweep secret T", answered=True)
    assert with_token is not None
    assert with_token.startswith(
        "the Ray cluster at h:6379 refused the token from evalsweep secret T"
    )
    for source in ("none", "evalsweep secret T"):
        nothing = refusal(failed, "h:6379", source, answered=False)
        assert nothing is not None and "nothing answers there" in nothing
    without = refusal(failed, "h:6379", "none", answered=True)
    assert without is not None and "give its token" in without
    unknown = refusal(failed, "h:6379", "RAY_AUTH_TOKEN", answered=None)
    assert (
        unknown == "cannot connect to the Ray cluster at h:6379 with the token from RAY_AUTH_TOKEN"
    )
    for message in (with_token, nothing, without, unknown):
        assert "\n" not in message
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the person's choice is kept, and named
    kept = refusal(failed, "h:6379", "evalsweep secret T", answered=True)
    assert kept is not None and kept.endswith(
        "(RAY_AUTH_MODE=disabled is set here, so Ray does not send it)"
    )


def test_whether_an_address_answers_is_a_real_tcp_connection() -> None:
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        assert answers(f"127.0.0.1:{port}") is True
        assert answers(f"ray://127.0.0.1:{port}") is True
    assert answers(f"127.0.0.1:{port}", timeout=2.0) is False  # closed now
    assert answers("auto") is None and answers("local") is None


def test_ray_reads_the_token_handed_over_after_it_was_imported(clean: Path) -> None:
    """Ray caches its auth mode at import and its token on first use: both are read again.

    The check is on Ray's own state (the mode its configuration reports, the
    token its loader holds), the two things a driver signs its calls with.
    """
    import ray  # noqa: F401 - imported first, as a CLI run that imported Ray early would
    from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode

    loader = AuthenticationTokenLoader.instance()
    assert get_authentication_mode() != AuthenticationMode.TOKEN
    assert not loader.has_token(ignore_auth_mode=True)  # read once: nothing cached
    with TokenEnvironment("tok-read-later-0123456789"):
        assert get_authentication_mode() == AuthenticationMode.TOKEN
        assert loader.get_raw_token(ignore_auth_mode=True) == "tok-read-later-0123456789"
    # Left as connected: Ray keeps the token it read, the environment is back as it was.
    assert "RAY_AUTH_TOKEN" not in os.environ and "RAY_AUTH_MODE" not in os.environ
    assert loader.get_raw_token(ignore_auth_mode=True) == "tok-read-later-0123456789"
    with pytest.raises(ConnectionError), TokenEnvironment("tok-refused-9876543210"):
        raise ConnectionError("Failed to connect")
    # Left after a failed connection: Ray reads the environment as it is again.
    assert get_authentication_mode() != AuthenticationMode.TOKEN
    assert not loader.has_token(ignore_auth_mode=True)


def test_a_ray_client_address_without_ray_client_is_one_line_from_code_eval(
    clean: Path, data_dir: Path
) -> None:
    """What the README says of ``ray://`` without ``ray[client]``: one line, nothing written."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("grpc") is not None:
        pytest.skip("Ray Client is installed here: the message is for where it is not")
    problems = Path(__file__).parent / "data" / "code_eval_distributed" / "HumanEval-first8.jsonl"
    samples = clean / "samples.jsonl"
    samples.write_text('{"task_id": "HumanEval/0", "completion": "    return 0\\n"}\n')
    src = str(Path(__file__).resolve().parents[1] / "src")
    done = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(problems),
         "--samples", str(samples), "--target", "ray://127.0.0.1:10001",
         "--store", str(clean / "s.sqlite")],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": src, "COLUMNS": "300"},
    )  # fmt: skip
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "ray://127.0.0.1:10001 is a Ray Client address" in lines[0]
    assert "pip install 'ray[client]'" in lines[0] and "HEAD:6379" in lines[0]
    assert not list(clean.glob("samples.jsonl_results.jsonl*"))

"""Where the Ray cluster token comes from, how it is passed, and what a refusal says.

These parts need no cluster: a real secret store in a temporary folder, real
token files, and the exceptions Ray raises. The real head with token
authentication is in tests/test_code_eval_ray_head.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalsweep.compute._ray_auth import (
    TokenEnvironment,
    find_token,
    init_kwargs,
    ray_client_missing,
    refusal,
)
from evalsweep.errors import ConfigError


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(tmp_path / "config.toml"))
    return tmp_path


def test_the_token_comes_from_the_secret_then_rays_own_conventions(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalsweep.agent import SecretBox

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
    assert wrong == "the Ray cluster at h:6379 refused the token from RAY_AUTH_TOKEN"
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

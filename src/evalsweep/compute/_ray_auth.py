"""Connecting to a Ray cluster started apart (``ray start --head``), token authentication included.

Ray 2.59 turned token authentication on by default for local clusters (2.61
extends it to all): every gRPC call must carry ``authorization: Bearer
<token>``. Ray's own driver finds the token by its conventions
(``RAY_AUTH_TOKEN``, the file named by ``RAY_AUTH_TOKEN_PATH``, then
``~/.ray/auth_token``), but Ray Client (``ray://``) sends no such header and
a guarded cluster answers it with a connection timeout. evalsweep looks the
token up the same way, or takes it from an evalsweep secret named by the
target's ``auth_token_secret``, hands it to the driver through its
environment for the connection, and to Ray Client as the ``authorization``
header. Only where the token came from is ever recorded, never its value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def find_token(secret_name: str | None) -> tuple[str | None, str]:
    """The cluster token and where it came from (``none`` when there is none).

    Raises:
        ConfigError: the named evalsweep secret does not exist.
    """
    if secret_name:
        from evalsweep.agent._secrets import SecretBox
        from evalsweep.errors import ConfigError

        values = SecretBox().environment()
        if secret_name not in values:
            raise ConfigError(
                f"no evalsweep secret named {secret_name!r} for the Ray token "
                f"(store it with: evalsweep secrets set {secret_name})"
            )
        return values[secret_name], f"evalsweep secret {secret_name}"
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"], "RAY_AUTH_TOKEN"
    candidates = []
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        candidates.append(
            (Path(os.environ["RAY_AUTH_TOKEN_PATH"]).expanduser(), "RAY_AUTH_TOKEN_PATH")
        )
    candidates.append((Path.home() / ".ray" / "auth_token", "~/.ray/auth_token"))
    for path, source in candidates:
        try:
            token = path.read_text().strip()
        except OSError:
            continue
        if token:
            return token, f"{source} ({path})"
    return None, "none"


def init_kwargs(address: str, token: str | None) -> dict[str, Any]:
    """What ``ray.init`` needs besides the address to pass the token."""
    if token and address.startswith("ray://"):
        return {"_metadata": [("authorization", f"Bearer {token}")]}
    return {}


class TokenEnvironment:
    """``RAY_AUTH_TOKEN`` (and ``RAY_AUTH_MODE=token``) set only while the driver connects."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> TokenEnvironment:
        if self.token:
            for name, value in (("RAY_AUTH_TOKEN", self.token), ("RAY_AUTH_MODE", "token")):
                self._saved[name] = os.environ.get(name)
                if name == "RAY_AUTH_MODE" and self._saved[name]:
                    continue  # the person chose a mode: keep it
                os.environ[name] = value
        return self

    def __exit__(self, *exc: object) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def refusal(exc: BaseException, address: str, token_source: str) -> str | None:
    """A clear sentence when ``exc`` says the cluster refused us for want of a token."""
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if "authenticat" in lowered or "unauthenticated" in lowered or "token" in lowered:
        if token_source == "none":
            return (
                f"the Ray cluster at {address} requires token authentication and no token was "
                "given (set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, write ~/.ray/auth_token, or "
                'name an evalsweep secret with auth_token_secret = "NAME" in the target)'
            )
        return f"the Ray cluster at {address} refused the token from {token_source}"
    if "failed to connect" in lowered and token_source == "none":
        # Ray's driver says no more than this when the cluster turns it away for want
        # of a token (the head's log has "Authentication required").
        return (
            f"cannot connect to the Ray cluster at {address}; if it uses token "
            "authentication (on by default for local clusters since Ray 2.59) give its token: "
            "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token, or an evalsweep secret "
            'named by auth_token_secret = "NAME" in the target'
        )
    if address.startswith("ray://") and "timeout" in lowered and token_source == "none":
        return (
            f"no answer from Ray Client at {address} (a cluster with token authentication, on by "
            "default since Ray 2.59, answers a client without a token this way: give the "
            "cluster's token, see `evalsweep targets` docs)"
        )
    return None


def ray_client_missing(address: str) -> str | None:
    """Why ``ray://`` cannot work in this environment (Ray Client needs grpcio), or None."""
    if not address.startswith("ray://"):
        return None
    import importlib.util

    if importlib.util.find_spec("grpc") is None:
        return (
            f"{address} is a Ray Client address and Ray Client is not installed "
            "(pip install 'ray[client]'); from a machine on the cluster's network, use the "
            'head\'s GCS address instead (address = "HEAD:6379")'
        )
    return None

"""Connecting to a Ray cluster started apart (``ray start --head``), token authentication included.

Ray 2.59 turned token authentication on by default for local clusters (2.61
extends it to all): every gRPC call must carry ``authorization: Bearer
<token>``. Ray's own driver finds the token by its conventions
(``RAY_AUTH_TOKEN``, the file named by ``RAY_AUTH_TOKEN_PATH``, then
``~/.ray/auth_token``) and signs its calls with it when ``RAY_AUTH_MODE`` is
``token``. evalsweep looks the token up the same way, or takes it from an
evalsweep secret named by the target's ``auth_token_secret``, and hands it to
the driver the documented way, through ``RAY_AUTH_TOKEN`` and
``RAY_AUTH_MODE``, set only while the driver connects.

Ray reads both once: the mode into its configuration when ``ray`` is first
imported, the token into its token loader's cache when the loader first runs.
evalsweep sets them later than that (the token may be an evalsweep secret,
and ``ray`` is often imported already), so after setting them it has Ray read
them again, as Ray's own ``ray start`` and ``ray get-auth-token --generate``
do (``Config.initialize`` and ``AuthenticationTokenLoader.reset_cache``). Once
connected the driver keeps the token in its own memory; the environment is
put back as it was, so no process started later (a sample least of all)
inherits it. The token is never written to a file, a log or the results:
only where it came from is recorded.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any


def find_token(secret_name: str | None) -> tuple[str | None, str]:
    """The cluster token and where it came from (``none`` when there is none).

    Raises:
        ConfigError: the named evalsweep secret does not exist.
    """
    if secret_name:
        from evalsweep.errors import ConfigError
        from evalsweep.secrets import SecretBox

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
    """``RAY_AUTH_TOKEN`` (and ``RAY_AUTH_MODE=token``) set only while the driver connects.

    Entering sets them and has Ray read them again; leaving puts the
    environment back. A connection that failed also puts Ray's own reading
    back, so the process is as it was; a connection made keeps the token Ray
    read (the driver signs every later call with it).
    """

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
            reread_ray_settings()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._saved and exc_type is not None:
            reread_ray_settings()


def reread_ray_settings() -> None:
    """Have Ray read ``RAY_AUTH_MODE`` and its token again from the environment and files.

    Ray caches both on first use; this is what Ray itself calls after it
    changes them (``ray start`` enabling token mode, ``ray get-auth-token
    --generate`` writing a token). A Ray without token authentication has
    neither and needs nothing.
    """
    import importlib

    try:
        raylet = importlib.import_module("ray._raylet")
        config, loader = raylet.Config, raylet.AuthenticationTokenLoader
    except (ImportError, AttributeError):
        return
    config.initialize("")
    loader.instance().reset_cache()


def answers(address: str, timeout: float = 5.0) -> bool | None:
    """Whether something accepts a TCP connection at ``address`` (None: not a host:port)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def refusal(
    exc: BaseException, address: str, token_source: str, answered: bool | None = None
) -> str | None:
    """A clear sentence when ``exc`` says the cluster refused us, or that nothing answered.

    Ray's driver says no more than "Failed to connect" whether nothing listens
    at the address or the cluster turned it away (the head's log then has
    "Authentication required" or "InvalidAuthToken"); ``answered``, whether
    the address takes a TCP connection, tells the two apart.
    """
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    no_token = (
        "set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, write ~/.ray/auth_token, or name an "
        'evalsweep secret with auth_token_secret = "NAME" in the target'
    )
    mode = os.environ.get("RAY_AUTH_MODE", "token")
    wrong_token = f"the Ray cluster at {address} refused the token from {token_source} " + (
        "(compare it with `ray get-auth-token` on the head)"
        if mode.lower() == "token"
        else f"(RAY_AUTH_MODE={mode} is set here, so Ray does not send it)"
    )
    if "authenticat" in lowered or "unauthenticated" in lowered or "token" in lowered:
        if token_source == "none":
            return (
                f"the Ray cluster at {address} requires token authentication and no token was "
                f"given ({no_token})"
            )
        return wrong_token
    if "failed to connect" in lowered or (address.startswith("ray://") and "timeout" in lowered):
        if answered is False:
            return (
                f"cannot connect to the Ray cluster at {address}: nothing answers there "
                "(is the head running, and is this its address?)"
            )
        if token_source != "none":
            if answered:
                return wrong_token
            return (
                f"cannot connect to the Ray cluster at {address} with the token from {token_source}"
            )
        if address.startswith("ray://"):
            return (
                f"no answer from Ray Client at {address} (a cluster with token authentication, "
                "on by default since Ray 2.59, answers a client without a token this way: "
                f"give the cluster's token: {no_token})"
            )
        return (
            f"cannot connect to the Ray cluster at {address}; if it uses token "
            "authentication (on by default for local clusters since Ray 2.59) give its token: "
            "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token, or an evalsweep secret "
            'named by auth_token_secret = "NAME" in the target'
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

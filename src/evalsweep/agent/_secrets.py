"""Secrets a sweep needs (a Hub token, a judge's API key), encrypted at rest.

Values are encrypted with Fernet under a key file in the person's config
directory (mode 0600) and only ever leave this module as environment
variables for a job. Every interface returns names only, and ``redact``
replaces any value wherever it could be echoed: job logs, tool results, errors.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from evalsweep.config import config_path
from evalsweep.errors import ConfigError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Values shorter than this are refused: redacting them would garble ordinary text.
MIN_LENGTH = 6


class SecretBox:
    """Named secrets in ``secrets.json`` beside the configuration, key in ``secrets.key``."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or config_path().parent
        self.key_path = self.directory / "secrets.key"
        self.path = self.directory / "secrets.json"
        self._cache: tuple[float, dict[str, str]] | None = None

    def names(self) -> list[str]:
        return sorted(self._tokens())

    def set(self, name: str, value: str) -> None:
        if not NAME.match(name):
            raise ConfigError(f"secret name {name!r} must look like an environment variable")
        if name.startswith("EVALSWEEP_"):
            raise ConfigError(
                f"secret name {name!r}: EVALSWEEP_* variables are evalsweep's settings, not "
                "secrets (a job would run otherwise than quoted); choose another name"
            )
        if len(value) < MIN_LENGTH or "\n" in value:
            raise ConfigError(f"secret {name}: value must be one line of {MIN_LENGTH}+ characters")
        tokens = self._tokens()
        tokens[name] = self._fernet(create=True).encrypt(value.encode()).decode()
        self._write(tokens)

    def remove(self, name: str) -> None:
        tokens = self._tokens()
        if name not in tokens:
            raise ConfigError(f"no secret named {name!r} in {self.path}")
        del tokens[name]
        self._write(tokens)

    def environment(self) -> dict[str, str]:
        """Every secret as ``{NAME: value}``, for a job's environment only."""
        mtime = self.path.stat().st_mtime if self.path.is_file() else 0.0
        if self._cache and self._cache[0] == mtime:
            return dict(self._cache[1])
        tokens = self._tokens()
        values: dict[str, str] = {}
        if tokens:
            fernet = self._fernet(create=False)
            for name, token in tokens.items():
                try:
                    values[name] = fernet.decrypt(token.encode()).decode()
                except InvalidToken:
                    raise ConfigError(
                        f"secret {name} in {self.path} does not match the key {self.key_path}"
                    ) from None
        self._cache = (mtime, values)
        return dict(values)

    def redact(self, text: str) -> str:
        """``text`` with every secret's value replaced by ``[secret NAME]``: as it is, and in
        each form a message may have written it in (Python's ``repr``, JSON with and without
        ASCII escapes, the renderer's escapes, white space folded), so no encoding of a value
        slips past."""
        forms = []
        for name, value in self.environment().items():
            for form in encoded_forms(value):
                forms.append((form, f"[secret {name}]"))
        for form, mask in sorted(forms, key=lambda pair: -len(pair[0])):
            text = text.replace(form, mask)
        return text

    def _tokens(self) -> dict[str, str]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read secrets {self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path}: expected a JSON object of name -> token")
        return {str(k): str(v) for k, v in data.items()}

    def _write(self, tokens: dict[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".tmp")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(tokens, handle, indent=1, sort_keys=True)
        os.replace(partial, self.path)
        self._cache = None

    def _fernet(self, *, create: bool) -> Fernet:
        if not self.key_path.is_file():
            if not create:
                raise ConfigError(f"secret key {self.key_path} is missing")
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(Fernet.generate_key())
        mode = self.key_path.stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigError(f"secret key {self.key_path} is readable by others (mode {mode:o})")
        return Fernet(self.key_path.read_bytes().strip())


def encoded_forms(value: str) -> set[str]:
    """``value`` as it may appear inside a message: as it is, inside ``repr``'s quotes,
    inside a JSON string (ASCII-escaped or not), as the one renderer shows it, and with its
    white space folded."""
    from evalsweep.text import visible

    forms = {
        value,
        repr(value)[1:-1],
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        visible(value),
        " ".join(value.split()),
    }
    return {form for form in forms if form}

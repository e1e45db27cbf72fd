"""Secrets a sweep needs (a Hub token, a judge's API key), encrypted at rest.

Values are encrypted with Fernet under a key file in the person's config
directory (mode 0600) and only ever leave this module as environment
variables for a job or a remote run. Every interface returns names only, and
:func:`redactor` replaces any value wherever it could be echoed: job logs, tool
results, audited commands, errors. Both files are written whole through
:mod:`evalsweep._atomic` (a new file under a random name, created 0600, renamed
into place), so a planted link is never followed and a reader never sees half.

A module of the ground floor: the MCP server (``agent/``), the targets
(``compute/``) and the command line import it; it imports only other top-level
modules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from evalsweep._atomic import atomic_write
from evalsweep.config import config_path
from evalsweep.errors import ConfigError

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
#: Values shorter than this are refused: redacting them would garble ordinary text.
MIN_LENGTH = 6
#: Names of evalsweep's own settings: never a secret's.
SETTINGS_PREFIX = "EVALSWEEP_"


def is_setting_name(name: str) -> bool:
    """Whether ``name`` is one of evalsweep's settings (``EVALSWEEP_*``). Such a variable
    changes what runs (task folders, data, the target) behind a sweep's words, so it is
    never stored, sent or set as a secret."""
    return name.startswith(SETTINGS_PREFIX)


def check_secret_name(name: str, where: str) -> None:
    """Refuse ``name`` as a secret when it is one of evalsweep's settings; ``where`` starts
    the message (``secret name``, ``--env-stdin: secret``).

    Raises:
        ConfigError: ``name`` is ``EVALSWEEP_*``.
    """
    if is_setting_name(name):
        raise ConfigError(
            f"{where} {name!r}: {SETTINGS_PREFIX}* variables are evalsweep's settings, not "
            "secrets (what runs would differ from what its words say); choose another name"
        )


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
        check_secret_name(name, "secret name")
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
        from cryptography.fernet import InvalidToken

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
        """``text`` with every stored secret's value masked (see :func:`redactor`)."""
        return redactor(self.environment())(text)

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
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(tokens, indent=1, sort_keys=True), mode=0o600)
        except OSError as exc:
            raise ConfigError(f"cannot write secrets {self.path} ({exc.strerror})") from None
        self._cache = None

    def _fernet(self, *, create: bool) -> Fernet:
        from cryptography.fernet import Fernet

        if not self.key_path.is_file():
            if not create:
                raise ConfigError(f"secret key {self.key_path} is missing")
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                atomic_write(self.key_path, Fernet.generate_key(), mode=0o600, exclusive=True)
            except FileExistsError:
                pass  # another process made it first: theirs is the key
            except OSError as exc:
                raise ConfigError(
                    f"cannot create the secret key {self.key_path} ({exc.strerror})"
                ) from None
        try:
            mode = self.key_path.stat().st_mode & 0o777
            key = self.key_path.read_bytes().strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the secret key {self.key_path} ({exc.strerror})"
            ) from None
        if mode & 0o077:
            raise ConfigError(f"secret key {self.key_path} is readable by others (mode {mode:o})")
        return Fernet(key)


def redactor(values: Mapping[str, str]) -> Callable[[str], str]:
    """A function masking each of ``values`` (``{NAME: value}``) in a text as
    ``[secret NAME]``: as it is, and in each form a message may have written it in
    (:func:`encoded_forms`: Python's ``repr``, JSON with and without ASCII escapes, the
    renderer's escapes, white space folded), longest first, so no encoding of a value slips
    past and a value inside another is not left half shown."""
    pairs = sorted(
        {
            (form, f"[secret {name}]")
            for name, value in values.items()
            for form in encoded_forms(value)
        },
        key=lambda pair: (-len(pair[0]), pair),
    )

    def redact(text: str) -> str:
        for form, mask in pairs:
            text = text.replace(form, mask)
        return text

    return redact


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

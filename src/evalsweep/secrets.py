r"""Secrets a sweep needs (a Hub token, a judge's API key), encrypted at rest.

Values are encrypted with Fernet under a key file in the person's config
directory (mode 0600) and only ever leave this module as environment
variables for a job or a remote run. Every interface returns names only, and
:func:`redactor` replaces any value wherever it could be echoed: job logs, tool
results, audited commands, errors. Both files are written whole through
:mod:`evalsweep._atomic` (a new file under a random name, created 0600, renamed
into place), so a planted link is never followed and a reader never sees half.

Three rules make that hold by construction, not by a list of cases:

* A value is a token (:data:`VALUE`): 6 to 4,096 of the characters
  ``A-Z a-z 0-9 . _ ~ + / = -``, which no quoting escapes. Masking
  (:func:`secret_spans`) finds every stretch of text that spells a value with each
  of its characters as it is or in any JSON, Python, URL or HTML escape, so a value
  written whole or half escaped by any common encoder is found.
* The directory is private: created 0700, and used only while it belongs to the
  user and no one else can write to it; both files are opened without following
  a link and used only if they are the user's regular files, readable by no one
  else. A file someone else placed is never read.
* A change is a read-modify-write under a lock (``secrets.lock``), so two
  ``secrets set`` at once both land.

A module of the ground floor: the MCP server (``agent/``), the targets
(``compute/``) and the command line import it; it imports only other top-level
modules.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from evalsweep._atomic import atomic_write
from evalsweep.config import config_path
from evalsweep.errors import ConfigError
from evalsweep.statedir import NotPrivate, open_own_file, open_private_dir

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: Values shorter than this are refused: redacting them would garble ordinary text.
MIN_LENGTH = 6
#: Values longer than this are refused: a secret is a token, not a document.
MAX_LENGTH = 4096
#: What a value may be (whole): a token every common encoding writes as it is.
VALUE = re.compile(rf"[A-Za-z0-9._~+/=-]{{{MIN_LENGTH},{MAX_LENGTH}}}")
VALUE_RULE = (
    f"{MIN_LENGTH} to {MAX_LENGTH} of the characters A-Z a-z 0-9 . _ ~ + / = - (a token: "
    "every log and message writes such a value as it is, so it is always masked)"
)
#: What an encrypted token in the secrets file is (Fernet's URL-safe base64).
TOKEN = re.compile(r"[A-Za-z0-9_=-]{1,65536}")
#: The largest secrets file read (names and encrypted tokens).
MAX_FILE_BYTES = 4 << 20
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
        self._cache: tuple[tuple[int, ...], dict[str, str]] | None = None

    def names(self) -> list[str]:
        return sorted(self._tokens())

    def set(self, name: str, value: str) -> None:
        check_name(name)
        check_value(name, value)
        with self._locked():
            tokens = self._tokens()
            tokens[name] = self._fernet(create=True).encrypt(value.encode()).decode()
            self._write(tokens)

    def remove(self, name: str) -> None:
        with self._locked():
            tokens = self._tokens()
            if name not in tokens:
                raise ConfigError(f"no secret named {name!r} in {self.path}")
            del tokens[name]
            self._write(tokens)

    def environment(self) -> dict[str, str]:
        """Every secret as ``{NAME: value}``, for a job's environment only."""
        from cryptography.fernet import InvalidToken

        mtime = self._seen()
        if self._cache and self._cache[0] == mtime:
            return dict(self._cache[1])
        tokens = self._tokens()
        values: dict[str, str] = {}
        if tokens:
            fernet = self._fernet(create=False)
            for name, token in tokens.items():
                try:
                    value = fernet.decrypt(token.encode()).decode()
                except (InvalidToken, UnicodeDecodeError):
                    raise ConfigError(
                        f"secret {name} in {self.path} does not match the key {self.key_path}"
                    ) from None
                if not VALUE.fullmatch(value):
                    raise ConfigError(
                        f"secret {name} in {self.path}: its value is not {VALUE_RULE}; "
                        f"store it again (evalsweep secrets set {name})"
                    )
                values[name] = value
        self._cache = (mtime, values)
        return dict(values)

    def redact(self, text: str) -> str:
        """``text`` with every stored secret's value masked (see :func:`redactor`)."""
        return redactor(self.environment())(text)

    def _seen(self) -> tuple[int, ...]:
        """What the cached values depend on: the folder, the secrets file and the key as they
        are now (without following a link), owner and mode included. Any change (a chmod,
        another owner, a new file) reads them again, with every check."""
        seen: list[int] = []
        for path in (self.directory, self.path, self.key_path):
            try:
                info = os.lstat(path)
            except OSError:
                seen += [-1]
                continue
            seen += [info.st_ino, info.st_dev, info.st_mode, info.st_uid, info.st_size,
                     info.st_mtime_ns, info.st_ctime_ns]  # fmt: skip
        return tuple(seen)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The secrets file to change, for this process alone (``secrets.lock``)."""
        directory = self._directory(create=True)
        try:
            fd = os.open(
                "secrets.lock",
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=directory,
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot lock the secrets in {self.directory} ({exc.strerror})"
            ) from None
        finally:
            os.close(directory)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _directory(self, *, create: bool) -> int:
        """The folder, opened; created 0700. Refused unless it is the user's and no one else
        can write to it: another user could otherwise swap the files in it
        (:func:`evalsweep.statedir.open_private_dir`, the one rule for private folders)."""
        try:
            return open_private_dir(self.directory.resolve(), create=create)
        except NotPrivate as exc:
            raise ConfigError(f"secrets {exc}") from None

    def _read_private(self, name: str, limit: int) -> bytes | None:
        """A file of the folder (None when there is none), read only if the folder is private
        and the file is the user's regular file that no one else can read
        (:func:`evalsweep.statedir.open_own_file`)."""
        shown = self.directory / name
        if not os.path.lexists(shown):
            return None  # nothing stored: whoever can write here, there is nothing to use
        directory = self._directory(create=False)
        try:
            fd = open_own_file(directory, name, os.O_RDONLY, str(shown))
        except FileNotFoundError:
            return None
        except NotPrivate as exc:
            raise ConfigError(str(exc)) from None
        finally:
            os.close(directory)
        try:
            data = os.read(fd, limit + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {shown} ({exc.strerror})") from None
        finally:
            os.close(fd)
        if len(data) > limit:
            raise ConfigError(f"{shown} is larger than {limit} bytes")
        return data

    def _tokens(self) -> dict[str, str]:
        data = self._read_private(self.path.name, MAX_FILE_BYTES)
        if data is None:
            return {}
        try:
            loaded = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not JSON"
            raise ConfigError(f"cannot read secrets {self.path}: {reason}") from None
        if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and TOKEN.fullmatch(v)
            for k, v in loaded.items()
        ):
            raise ConfigError(f"{self.path}: expected a JSON object of name -> token")
        for name in loaded:
            try:
                check_name(name)
            except ConfigError as exc:
                raise ConfigError(f"{self.path}: {exc}") from None
        return dict(loaded)

    def _write(self, tokens: dict[str, str]) -> None:
        try:
            atomic_write(self.path, json.dumps(tokens, indent=1, sort_keys=True), mode=0o600)
        except OSError as exc:
            raise ConfigError(f"cannot write secrets {self.path} ({exc.strerror})") from None
        self._cache = None

    def _fernet(self, *, create: bool) -> Fernet:
        from cryptography.fernet import Fernet

        key = self._read_private(self.key_path.name, 256)
        if key is None:
            if not create:
                raise ConfigError(f"secret key {self.key_path} is missing")
            os.close(self._directory(create=True))
            try:
                atomic_write(self.key_path, Fernet.generate_key(), mode=0o600, exclusive=True)
            except FileExistsError:
                pass  # another process made it first: theirs is the key
            except OSError as exc:
                raise ConfigError(
                    f"cannot create the secret key {self.key_path} ({exc.strerror})"
                ) from None
            key = self._read_private(self.key_path.name, 256)
            if key is None:
                raise ConfigError(f"secret key {self.key_path} vanished as it was created")
        try:
            return Fernet(key.strip())
        except ValueError:
            raise ConfigError(f"secret key {self.key_path} is not a Fernet key") from None


def check_name(name: str) -> None:
    """Refuse a name that is not an environment variable's, or is one of evalsweep's settings.

    Raises:
        ConfigError: naming the problem.
    """
    if not NAME.fullmatch(name):
        raise ConfigError(
            f"secret name {name.encode('unicode_escape').decode('ascii')!r} must look like an "
            "environment variable (a letter or _, then letters, digits or _; at most 64)"
        )
    check_secret_name(name, "secret name")


def check_value(name: str, value: str) -> None:
    """Refuse a value that is not a token (:data:`VALUE`); the message never shows it.

    Raises:
        ConfigError: naming the secret and the rule.
    """
    if not VALUE.fullmatch(value):
        raise ConfigError(f"secret {name}: the value must be {VALUE_RULE}")


def _hex(number: int, width: int) -> str:
    """``number`` in hex, each letter matching either case."""
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in f"{number:0{width}x}")


@functools.lru_cache(maxsize=4096)
def _spelled(char: str) -> str:
    """A pattern for ``char`` in every spelling the escapes of JSON, Python, URLs and HTML give
    it (hex in either case, up to 8 leading zeros where the syntax allows them): itself;
    ``\\uXXXX`` (a surrogate pair beyond the BMP), ``\\UXXXXXXXX``, ``\\xXX``, an octal
    ``\\NNN`` and ``\\N{NAME}``; ``%XX`` of each UTF-8 byte; ``&#N;``, ``&#xX;`` and every
    named HTML reference of the character (``html.entities.html5``); JSON's ``\\/``; the
    backslash escapes of quotes, the backslash and white space; and any run of white space
    for white space (folded text). The names come from the standards' own tables."""
    import html.entities
    import unicodedata

    code = ord(char)
    zeros = "0{0,8}"
    options = [re.escape(char), f"&#{zeros}{code};", f"&#[xX]{zeros}{_hex(code, 1)};"]
    options += [
        re.escape(f"&{name}") + ("" if name.endswith(";") else ";?")
        for name, text in html.entities.html5.items()
        if text == char
    ]
    if code > 0xFFFF:
        high, low = divmod(code - 0x10000, 0x400)
        options.append(rf"\\u{_hex(0xD800 + high, 4)}\\u{_hex(0xDC00 + low, 4)}")
    else:
        options.append(rf"\\u{_hex(code, 4)}")
    options.append(rf"\\U{_hex(code, 8)}")
    if code <= 0xFF:
        options.append(rf"\\x{_hex(code, 2)}")
    if code <= 0o777:
        options.append(rf"\\0{{0,2}}{code:o}(?![0-7])" if code < 0o100 else rf"\\{code:o}")
    name = unicodedata.name(char, "")
    if name:
        options.append(
            r"\\N\{"
            + "".join(f"[{c.lower()}{c}]" if c.isalpha() else re.escape(c) for c in name)
            + r"\}"
        )
    options.append("".join(f"%{_hex(byte, 2)}" for byte in char.encode("utf-8")))
    short = {"/": "/", '"': '"', "'": "'", "\\": "\\\\", "\t": "t", "\n": "n", "\r": "r"}
    if char in short:
        options.append("\\\\" + short[char])
    if char.isspace():
        options.append(r"\s+")
    return "(?:" + "|".join(options) + ")"


def spelled_length(value: str) -> int:
    """The most characters any one spelling of ``value`` may take (a bound for readers that
    look at a window of text, so a value at its edge is seen whole)."""
    import unicodedata

    per = [64 + len(unicodedata.name(char, "")) for char in value]
    return sum(per)


@functools.lru_cache(maxsize=256)
def _finder(value: str) -> re.Pattern[str]:
    """Every place a spelling of ``value`` starts (overlapping), its extent in group 1."""
    return re.compile("(?=(" + "".join(_spelled(char) for char in value) + "))")


def secret_spans(text: str, values: Mapping[str, str]) -> list[tuple[int, int, tuple[str, ...]]]:
    """(start, stop, names) of every stretch of ``text`` that spells a value, each character
    of it in any of the spellings of :func:`_spelled` (so a value written half escaped is
    found too); overlapping finds, of one value or of several, are one stretch."""
    found: list[tuple[int, int, str]] = []
    for name, value in values.items():
        if not value:
            continue
        for match in _finder(value).finditer(text):
            found.append((match.start(1), match.end(1), name))
    found.sort()
    merged: list[tuple[int, int, tuple[str, ...]]] = []
    for start, stop, name in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            names = last[2] if name in last[2] else (*last[2], name)
            merged[-1] = (last[0], max(last[1], stop), names)
        else:
            merged.append((start, stop, (name,)))
    return merged


def mask(names: tuple[str, ...]) -> str:
    """What stands where a secret was: ``[secret NAME]`` (one per value a stretch held)."""
    return "".join(f"[secret {name}]" for name in names)


def redactor(values: Mapping[str, str]) -> Callable[[str], str]:
    """A function masking each of ``values`` (``{NAME: value}``) in a text as
    ``[secret NAME]``: every stretch that spells a value, each of its characters as it is or
    escaped as JSON, Python, URLs or HTML would escape it (:func:`secret_spans`), overlapping
    values masked together, so no common encoding of a value, or of the text around it, lets
    a piece of it through. (A job holds its secrets and could write them in a code of its own:
    masking catches what ordinary tools echo, it is no defence against the job itself.)"""
    values = {name: value for name, value in values.items() if value}

    def redact(text: str) -> str:
        if not values:
            return text
        out, cursor = [], 0
        for start, stop, names in secret_spans(text, values):
            out.append(text[cursor:start])
            out.append(mask(names))
            cursor = stop
        out.append(text[cursor:])
        return "".join(out)

    return redact


class StoredSecrets:
    """Masks every secret stored when it is called, not when it was made (a secret set while
    a target runs is masked from then on). False while none is stored, so a text without
    secrets can be kept exactly as it is."""

    def __init__(self) -> None:
        self.box = SecretBox()

    def __bool__(self) -> bool:
        return bool(self.box.environment())

    def __call__(self, text: str) -> str:
        values = self.box.environment()
        return redactor(values)(text) if values else text


def encoded_forms(value: str) -> set[str]:
    """``value`` as it may appear inside a message: as it is, inside ``repr``'s quotes,
    inside a JSON string (ASCII-escaped or not, and with JSON's optional ``\\/``), as the
    one renderer shows it, with its white space folded, and URL-encoded. The MCP server
    replaces a tool argument's text by its label in each of these forms
    (``agent/_inputs.py``); secrets are masked by :func:`secret_spans`, which finds every
    spelling, not a list."""
    from urllib.parse import quote

    from evalsweep.text import visible

    as_json = json.dumps(value)[1:-1]
    url = quote(value, safe="")
    forms = {
        value,
        repr(value)[1:-1],
        as_json,
        as_json.replace("/", "\\/"),
        json.dumps(value, ensure_ascii=False)[1:-1],
        visible(value),
        " ".join(value.split()),
        url,
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), url),
    }
    return {form for form in forms if form}

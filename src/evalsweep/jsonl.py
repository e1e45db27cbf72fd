"""JSON Lines, read and written by one rule: a line ends at ``b"\\n"`` and nowhere else.

Text that people and benchmarks write holds characters that ``str.splitlines()``
and text-mode files treat as line breaks (``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``,
``\\x85``, ``\\u2028``, ``\\u2029``). Inside a JSON string they are ordinary characters,
so a JSON Lines file is split on ``b"\\n"`` only (bytes, line by line), and each line is
decoded and parsed on its own; a trailing ``b"\\r"`` (a ``\\r\\n`` file) is JSON
whitespace. Every writer of JSON Lines in evalsweep, and every reader of the files
evalsweep writes itself (result pieces, resume files), goes through here; a person's
input files go through :mod:`evalsweep.datafiles`, which keeps this line rule and adds
strict limits for untrusted data.

The writer escapes ``\\x85``, ``\\u2028`` and ``\\u2029`` (so even a reader that splits on
them reads the file right) and lone surrogates (which UTF-8 cannot hold, and which
JSON's ``\\udXXX`` escapes carry exactly); everything else is written as UTF-8.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

#: The only byte that ends a line.
LINE_END = b"\n"

_ESCAPE = re.compile("[\x85\u2028\u2029\ud800-\udfff]")
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class LineError(ValueError):
    """A line that is not one JSON value; ``problem`` says why (no file or line in it)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps_line(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """One JSON value as one line of UTF-8 bytes, ending with ``b"\\n"``.

    Raises:
        LineError: a string holds a high and a low surrogate as two separate code points
            (JSON readers join them into one character, so it would not read back as written).
    """
    return dumps_text(value, default).encode("utf-8") + LINE_END


def dumps_text(
    value: Any,
    default: Callable[[Any], Any] | None = None,
    separators: tuple[str, str] | None = None,
) -> str:
    """One JSON value as text that encodes to UTF-8 and holds no line break: the writer's rule.

    Raises:
        LineError: as :func:`dumps_line`.
    """
    text = json.dumps(value, ensure_ascii=False, default=default, separators=separators)
    if _ESCAPE.search(text):
        if _PAIR.search(text):
            raise LineError(
                "a string holds a surrogate pair as two code points, which JSON cannot carry"
            )
        text = _ESCAPE.sub(_escape, text)
    return text


def dumps_lines(values: Iterable[Any], default: Callable[[Any], Any] | None = None) -> bytes:
    """Many JSON values as JSON Lines bytes."""
    return b"".join(dumps_line(value, default) for value in values)


def loads_line(raw: bytes) -> Any:
    """The JSON value of one line's bytes (without its ``b"\\n"``).

    Raises:
        LineError: the bytes are not UTF-8, or not one JSON value.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LineError(f"not UTF-8 text (byte {exc.start + 1}: {exc.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise LineError("not valid JSON (nested too deeply)") from None


class PositionedError(LineError):
    """A :class:`LineError` with the 1-based line it happened on."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line


def split_lines(source: bytes | Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line bytes without its ``b"\\n"``) for every line of ``source``.

    ``source`` is the whole content, or a binary file (read line by line, so a large
    file is never held whole). A last line without ``b"\\n"`` is still a line.
    """
    if isinstance(source, bytes):
        if not source:
            return
        lines: Iterable[bytes] = source.removesuffix(LINE_END).split(LINE_END)
    else:
        lines = source
    for number, raw in enumerate(lines, start=1):
        yield number, raw.removesuffix(LINE_END)


def is_blank(raw: bytes) -> bool:
    """A line of JSON whitespace only (skipped by readers)."""
    return not raw.strip(b" \t\r")


def iter_values(source: bytes | Iterable[bytes]) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) for every non-blank line of ``source``.

    Raises:
        PositionedError: a line is not UTF-8 or not JSON (``line`` says which).
    """
    for number, raw in split_lines(source):
        if is_blank(raw):
            continue
        try:
            yield number, loads_line(raw)
        except LineError as exc:
            raise PositionedError(number, exc.problem) from None


def read_values(
    path: Path, opener: Callable[[Path], IO[bytes]] | None = None
) -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of every non-blank line of a JSON Lines file.

    ``opener`` opens the file for binary reading (e.g. ``gzip.open``; default: plain).

    Raises:
        PositionedError: a line is not UTF-8 or not JSON (``line`` says which).
        OSError: the file cannot be read.
    """
    with (opener or _open_binary)(path) as handle:
        yield from iter_values(handle)


def _open_binary(path: Path) -> IO[bytes]:
    return path.open("rb")


def holds_surrogate(value: Any, raw: bytes | None = None) -> bool:
    """Whether a parsed JSON value holds a lone surrogate (text that is not Unicode).

    Only JSON's ``\\udXXX`` escapes can produce one, so ``raw`` (the line's bytes),
    when given, rules most lines out without walking the value.
    """
    if raw is not None and not _SURROGATE_ESCAPE.search(raw):
        return False
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(holds_surrogate(k) or holds_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_surrogate(item) for item in value)
    return False

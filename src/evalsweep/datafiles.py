"""The one reader of a person's JSON Lines, JSON and gzip data files.

Every file evalsweep reads records from (code problems and samples, task data,
custom tasks) comes through :func:`read_records`, which turns every way a file
can be malformed into one :class:`~evalsweep.errors.DataError` line naming the
file and line, before any record is handed on:

* the path must open as a regular file: a directory, a FIFO, a device, a
  symlink loop or a missing file is refused without blocking or reading;
* each line is at most :data:`MAX_LINE_BYTES` (a JSON document at most
  :data:`MAX_DOCUMENT_BYTES`), strict UTF-8, and gzip data must be whole;
* each value is strict JSON: nesting at most :data:`MAX_DEPTH` deep (checked
  in linear time before parsing), integers of at most :data:`MAX_INT_DIGITS`
  digits, finite numbers (no ``NaN``/``Infinity``, no ``1e999``), no key twice
  in one object, no lone surrogate in any string (unless the caller takes
  them: a samples file's model-written text, which is judged as written);
* each record is a JSON object, and a file with no records is refused.

Lines end at ``b"\n"`` and nowhere else, the rule of :mod:`evalsweep.jsonl`:
a file is read in binary, line by line, so ``\r``, ``\x85``, ``\u2028`` and the
other characters ``str.splitlines()`` breaks on stay inside their line.

The file is opened once and hashed as it is read, so :attr:`RecordFile.digest`
is the digest of exactly the bytes the records came from.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import hashlib
import itertools
import json
import math
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from evalsweep.errors import DataError

#: Longest line of a JSON Lines file (after gzip decompression).
MAX_LINE_BYTES = 16 << 20
#: Largest whole JSON document (a ``.json`` file).
MAX_DOCUMENT_BYTES = 64 << 20
#: Deepest nesting of arrays and objects in one record.
MAX_DEPTH = 64
#: Most digits in one JSON integer (Python's own int-to-str limit).
MAX_INT_DIGITS = 4300


@dataclass(frozen=True)
class Record:
    """One JSON object of a file: where it starts and what it holds."""

    line: int  # 1-based line the object starts on
    value: dict[str, Any]
    item: int | None = None  # 0-based index in a JSON array; None in JSON Lines

    def where(self) -> str:
        """``LINE`` or ``LINE (item N)``: the part of a message after the file name."""
        return str(self.line) if self.item is None else f"{self.line} (item {self.item})"


@dataclass(frozen=True)
class RecordFile:
    """Every record of a file, and the SHA-256 of the bytes they were parsed from."""

    path: Path
    records: list[Record]
    digest: str


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as it can be shown in a one-line message (escaped if it holds odd characters)."""
    text = os.fspath(path)
    return text if text.isprintable() else ascii(text)


def display_value(value: object, width: int = 80) -> str:
    """A value of a file for a one-line message: repr (escapes anything not printable), cut."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


class _Malformed(Exception):
    """A value the strict JSON rules refuse; its message completes ``file:line: ``."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position  # where in the text, when known


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _Malformed(f"key {display_value(key)} appears twice in one object")
        value[key] = item
    return value


def _bounded_int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise _Malformed(f"an integer has more than {MAX_INT_DIGITS} digits")
    try:
        return int(text)
    except ValueError as error:  # an interpreter limit below ours
        raise _Malformed(f"an integer cannot be read ({error})") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: written back out it would not be JSON
        raise _Malformed(f"a number too large for a float ({text[:20]})")
    return value


def _no_constant(name: str) -> Any:
    raise _Malformed(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_object,
    parse_int=_bounded_int,
    parse_float=_finite_float,
    parse_constant=_no_constant,
)
# Only for other harnesses' logs (lm-eval writes NaN and -Infinity): numbers as Python reads them.
_NONFINITE_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_int=_bounded_int)
# evalsweep's own documents: ``NaN`` and ``Infinity`` as ``json.dumps`` writes them, no overflow.
_CONSTANTS_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_object, parse_int=_bounded_int, parse_float=_finite_float
)
_STRUCTURE = re.compile(r'["\[\]{}]')
_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_TOO_DEEP = f"arrays and objects nested deeper than {MAX_DEPTH} levels"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_depth(text: str, start: int = 0, end: int | None = None, limit: int = MAX_DEPTH) -> None:
    """Refuse nesting deeper than ``limit`` in linear time, without recursion.

    Strings are skipped whole (an anchored match from their opening quote), so
    every character is looked at a bounded number of times.
    """
    end = len(text) if end is None else end
    if text.count("[", start, end) + text.count("{", start, end) <= limit:
        return
    depth, position = 0, start
    while (found := _STRUCTURE.search(text, position, end)) is not None:
        position = found.end()
        char = found.group()
        if char == '"':
            rest = _STRING_REST.match(text, position, end)
            if rest is None:
                return  # an unterminated string: the parser reports it
            position = rest.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                raise _Malformed(_TOO_DEEP, position)
        else:
            depth -= 1


def _check_strings(value: Any) -> None:
    """Refuse a lone surrogate (``"\\ud800"``) in any key or string: it is not text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts: list[str] = [item]
        elif isinstance(item, dict):
            texts = list(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
            continue
        else:
            continue
        for text in texts:
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise _Malformed("a string holds a lone surrogate, which is not text") from None


def _decode(text: str, start: int = 0, decoder: json.JSONDecoder = _DECODER) -> tuple[Any, int]:
    """One strict JSON value from ``text[start:]``: (value, end)."""
    try:
        return decoder.raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise _Malformed(f"not valid JSON ({error.msg})", error.pos) from None
    except RecursionError:  # not reached after _check_depth; kept as a last line
        raise _Malformed(_TOO_DEEP) from None


def parse_object(text: str, *, surrogates: bool = False) -> dict[str, Any]:
    """One line of JSON Lines as an object, by the strict rules; ValueError if refused.

    ``surrogates`` as for :func:`read_records`.
    """
    try:
        return _parse_line(text, surrogates=surrogates)
    except _Malformed as error:
        raise ValueError(str(error)) from None


def _parse_line(
    text: str, decoder: json.JSONDecoder = _DECODER, surrogates: bool = False
) -> dict[str, Any]:
    _check_depth(text)
    start = len(text) - len(text.lstrip(" \t\r\n"))
    value, end = _decode(text, start, decoder)
    if text[end:].strip(" \t\r\n"):
        raise _Malformed("not valid JSON (extra data after the value)")
    if not surrogates and _SURROGATE_ESCAPE.search(text):
        _check_strings(value)
    if not isinstance(value, dict):
        raise _Malformed(f"expected a JSON object, found {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "a number"


def open_regular(path: Path) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (DataError if not).

    Opened non-blocking, so a FIFO is refused instead of waiting for a writer.
    """
    shown = display_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DataError(f"data file not found: {shown}") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            reason = "a symlink loop"
        elif error.errno == errno.ENOTDIR:
            reason = "not found (a part of the path is not a directory)"
        elif error.errno in (errno.EACCES, errno.EPERM):
            reason = "not readable (permission denied)"
        elif error.errno == errno.ENAMETOOLONG:
            reason = "a name too long to open"
        else:
            reason = f"not openable ({error.strerror})"
        raise DataError(f"{shown}: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if stat.S_ISDIR(mode):
                kind = "a directory"
            elif stat.S_ISFIFO(mode):
                kind = "a FIFO (named pipe)"
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                kind = "a device"
            else:
                kind = "not a regular file"
            raise DataError(f"{shown}: is {kind}, not a data file")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Hashing:
    """A binary reader that hashes what is read through it."""

    def __init__(self, handle: gzip.GzipFile | BinaryIO, digest: Any) -> None:
        self._handle = handle
        self._digest = digest

    def readline(self, limit: int) -> bytes:
        data = self._handle.readline(limit)
        self._digest.update(data)
        return data

    def read(self, limit: int) -> bytes:
        data = self._handle.read(limit)
        self._digest.update(data)
        return data


def _lines(path: Path, reader: _Hashing) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line, bounded and strictly UTF-8."""
    shown = display_path(path)
    number = 0
    while True:
        number += 1
        raw = reader.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            raise DataError(f"{shown}:{number}: line longer than {MAX_LINE_BYTES >> 20} MiB")
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(
                f"{shown}:{number}: not valid UTF-8 (byte {error.start + 1} of the line)"
            ) from None


def _jsonl_records(
    path: Path, reader: _Hashing, decoder: json.JSONDecoder, surrogates: bool
) -> Iterator[Record]:
    shown = display_path(path)
    for number, text in _lines(path, reader):
        if not text.strip(" \t\r\n"):
            continue
        try:
            value = _parse_line(text, decoder, surrogates)
        except _Malformed as error:
            raise DataError(f"{shown}:{number}: {error}") from None
        yield Record(number, value)


def _document_records(
    path: Path, reader: _Hashing, decoder: json.JSONDecoder, surrogates: bool
) -> Iterator[Record]:
    """The objects of a file holding one JSON array, each with the line it starts on."""
    shown = display_path(path)
    text = _document_text(reader.read(MAX_DOCUMENT_BYTES + 1), shown)

    def line_of(position: int) -> int:
        return text.count("\n", 0, position) + 1

    blank = " \t\r\n"
    position = len(text) - len(text.lstrip(blank))
    if position == len(text):
        return
    try:
        _check_depth(text, position, limit=MAX_DEPTH + 1)  # + 1: the array around the items
    except _Malformed as error:
        raise DataError(f"{shown}:{line_of(error.position or 0)}: {error}") from None
    if text[position] != "[":
        raise DataError(f"{shown}:{line_of(position)}: expected a JSON array of objects")
    position += 1
    item, line, counted = 0, 1, 0

    def skip(at: int) -> int:
        while at < len(text) and text[at] in blank:
            at += 1
        return at

    position = skip(position)
    if position < len(text) and text[position] == "]":
        position += 1
    else:
        while True:
            line += text.count("\n", counted, position)
            counted = position
            try:
                value, position = _decode(text, position, decoder)
                if not surrogates and _SURROGATE_ESCAPE.search(text, counted, position):
                    _check_strings(value)
            except _Malformed as error:
                raise DataError(f"{shown}:{line} (item {item}): {error}") from None
            if not isinstance(value, dict):
                raise DataError(
                    f"{shown}:{line} (item {item}): expected a JSON object, found {_kind(value)}"
                )
            yield Record(line, value, item)
            item += 1
            position = skip(position)
            if position < len(text) and text[position] == ",":
                position = skip(position + 1)
                continue
            if position < len(text) and text[position] == "]":
                position += 1
                break
            line_at = line_of(min(position, len(text)))
            raise DataError(f"{shown}:{line_at}: not valid JSON (expected ',' or ']')")
    position = skip(position)
    if position < len(text):
        raise DataError(f"{shown}:{line_of(position)}: not valid JSON (extra data after the array)")


def read_records(
    path: str | os.PathLike[str],
    *,
    what: str = "records",
    limit: int | None = None,
    lines: bool | None = None,
    empty_ok: bool = False,
    nonfinite: bool = False,
    surrogates: bool = False,
) -> RecordFile:
    """Every object of a ``.jsonl``, ``.jsonl.gz`` (gzip) or ``.json`` (one array) file.

    Args:
        path: the file; a name ending in ``.gz`` is gzip data.
        lines: JSON Lines (True) or one JSON array (False); by default a name
            ending in ``.json`` is an array and anything else JSON Lines.
        what: what the records are, for the message when there are none ("samples").
        limit: stop after this many records (the rest is not read).
        empty_ok: return no records for a file without any instead of refusing it.
        nonfinite: accept ``NaN``, ``Infinity`` and floats that overflow (other
            harnesses' logs hold them); every other rule stands.
        surrogates: accept lone surrogates (``"\\ud800"``) in strings. For text a
            model wrote (a samples file's completions): one process given such a
            program fails to compile it, and that is its verdict; refusing the file
            would refuse every other sample with it. Whoever takes them writes them
            back through :mod:`evalsweep.jsonl`, which escapes them.

    Raises:
        DataError: one line naming the file (and line) for any malformed input.
    """
    path = Path(path)
    shown = display_path(path)
    fd = open_regular(path)
    digest = hashlib.sha256()
    records: list[Record] = []
    line = 0
    try:
        with open(fd, "rb", closefd=True) as raw:
            gzipped = path.suffix == ".gz"
            source: gzip.GzipFile | BinaryIO = (
                gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            )
            reader = _Hashing(source, digest)
            decoder = _NONFINITE_DECODER if nonfinite else _DECODER
            if lines is False or (lines is None and path.suffix == ".json"):
                iterator = _document_records(path, reader, decoder, surrogates)
            else:
                iterator = _jsonl_records(path, reader, decoder, surrogates)
            for record in itertools.islice(iterator, limit):
                line = record.line
                records.append(record)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        after = f" after line {line}" if line else ""
        raise DataError(f"{shown}: not whole gzip data{after} ({error})") from None
    except OSError as error:
        raise DataError(f"{shown}: cannot be read ({error.strerror or error})") from None
    if not records and not empty_ok:
        raise DataError(f"{shown}: empty file (no {what})")
    return RecordFile(path, records, digest.hexdigest())


def read_json_object(
    path: str | os.PathLike[str], *, nonfinite: bool = False
) -> tuple[dict[str, Any], str]:
    """A file holding one JSON object (by the same strict rules) and its SHA-256.

    ``nonfinite`` as for :func:`read_records`.

    Raises:
        DataError: one line naming the file (and line) for any malformed input.
    """
    path = Path(path)
    shown = display_path(path)
    fd = open_regular(path)
    digest = hashlib.sha256()
    try:
        with open(fd, "rb", closefd=True) as raw:
            data = _Hashing(raw, digest).read(MAX_DOCUMENT_BYTES + 1)
    except OSError as error:
        raise DataError(f"{shown}: cannot be read ({error.strerror or error})") from None
    decoder = _NONFINITE_DECODER if nonfinite else _DECODER
    return _object_of(data, shown, decoder), digest.hexdigest()


def read_json_text(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object that evalsweep wrote to a file, by the strict rules.

    As :func:`parse_json_text`, for a file: it must be a regular file of at most
    :data:`MAX_DOCUMENT_BYTES`.
    """
    path = Path(path)
    shown = display_path(path)
    fd = open_regular(path)
    try:
        with open(fd, "rb", closefd=True) as raw:
            data = raw.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as error:
        raise DataError(f"{shown}: cannot be read ({error.strerror or error})") from None
    return _object_of(data, shown, _CONSTANTS_DECODER)


def parse_json_text(data: str | bytes, where: str) -> dict[str, Any]:
    """One JSON object that evalsweep wrote (a result document), from text.

    The strict rules of this module, except that ``NaN`` and ``Infinity`` are
    read, as ``json.dumps`` writes them (a number that overflows is still refused).

    Raises:
        DataError: one line starting with ``where`` (and the line) for malformed input.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _object_of(raw, where, _CONSTANTS_DECODER)


def _document_text(data: bytes, shown: str) -> str:
    """A whole-file JSON document's text: within the size cap and valid UTF-8."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise DataError(f"{shown}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(f"{shown}:{line}: not valid UTF-8") from None


def _object_of(data: bytes, shown: str, decoder: json.JSONDecoder) -> dict[str, Any]:
    text = _document_text(data, shown)
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise DataError(f"{shown}:{line}: a NUL byte, which no JSON text holds")
    try:
        _check_depth(text)
        return _parse_line(text, decoder)
    except _Malformed as error:
        if error.position is None:  # found by a parser hook, which is not told where
            raise DataError(f"{shown}: {error}") from None
        line = text.count("\n", 0, error.position) + 1
        raise DataError(f"{shown}:{line}: {error}") from None

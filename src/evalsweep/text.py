"""Text from outside: one rule for the strings evalsweep accepts, one renderer for what it shows.

Checkpoint references, task names, targets, devices and every other free string an
agent sends (or a folder name carries) are data. Two things keep data from acting
as something else on a person's screen:

- **The rule** (:func:`problem`, :func:`check`): a free string is refused when it
  holds a character of the Unicode categories ``Cc`` (C0 and C1 controls, so
  ESC, CSI U+009B, NUL, newlines and tabs), ``Cf`` (format characters: the
  right-to-left override U+202E, the zero width space U+200B, the byte-order mark),
  ``Cs`` (lone surrogates), ``Co`` (private use), ``Cn`` (unassigned), ``Zl`` or
  ``Zp`` (line and paragraph separators), any space other than U+0020, a
  combining mark with nothing to combine with (at the start, or after a space or
  punctuation), white space at either end, a form other than NFC (so two strings
  that look the same are the same), or more characters than its kind allows. The
  MCP server applies it to every string argument of every tool, once, before the
  tool runs.
- **The renderer** (:func:`visible`): everything a person reads to decide or to
  audit (``evalsweep approve``, ``evalsweep audit``, the approval question an MCP
  client shows, job logs, every line the command line prints, the reports) goes
  through it. A character the rule would refuse is shown as its escape
  (``\\x9b``, ``\\u202e``, ``\\U000e0041``), so what reaches the screen is plain
  printable text whatever the data held, and escaped text is plainly not the
  clean text it imitates. In one-line text (a name, a message) a run of two or more
  spaces is escaped too (``\\x20\\x20``): spaces cannot push part of a name to the
  start of a row of its own. :func:`visible` is idempotent.
- **Rows** (:func:`fold`, :func:`shortened`): what a person approves is printed in
  rows no wider than their terminal, each row after a line's first one starting with
  :data:`CONTINUED`, so the terminal never wraps a line itself and no part of a name
  starts a row as if it were a line of its own; a one-line text whose width nobody
  knows (the approval question an MCP client shows) holds each long name shortened,
  with its elision and length said.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from evalsweep.errors import EvalsweepError

#: Unicode categories no free string may hold and the renderer always escapes.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
#: Most characters of a free string, unless its kind says otherwise.
MAX_CHARS = 4096
#: Most combining marks in a row the renderer shows as they are (more are escaped).
MAX_MARKS = 2
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
#: How every row of a folded line after its first begins (no line a person approves does).
CONTINUED = "  ... "
#: Most characters of a name in one-line text whose width is unknown (longer: shortened).
MAX_NAME_CHARS = 120
#: The narrowest rows :func:`fold` makes (a terminal narrower still wraps them itself).
MIN_ROW = 24
_CATEGORY_WORDS = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "a lone surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than ' '",
}


class TextError(EvalsweepError):
    """A free string the rule refuses (named, with the offending character escaped)."""


def escape(char: str) -> str:
    """One character as its escape: ``\\n``, ``\\x9b``, ``\\u200b`` or ``\\U000e0041``."""
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def _unsafe(char: str) -> bool:
    """A character that never reaches a screen as itself."""
    category = unicodedata.category(char)
    return category in REFUSED_CATEGORIES or (category == "Zs" and char != " ")


def _base(char: str) -> bool:
    """A character a combining mark may follow (a letter, number or another mark)."""
    return unicodedata.category(char)[0] in "LNM"


def visible(text: str, *, newlines: bool = False) -> str:
    """``text`` as it may be shown to a person: every character the rule refuses escaped
    (``newlines``: ``\\n`` and ``\\t`` kept, for multi-line text such as a log), combining
    marks kept only after a letter, number or mark and at most ``MAX_MARKS`` in a row; in
    one-line text (``newlines`` false) every space of a run of two or more escaped."""
    out: list[str] = []
    marks = 0
    previous = ""
    for index, char in enumerate(text):
        if not newlines and char == " " and (text[index - 1 : index] == " " or
                                             text[index + 1 : index + 2] == " "):  # fmt: skip
            out.append(escape(char))
            previous, marks = "\\", 0
            continue
        if newlines and char in "\n\t":
            out.append(char)
            previous, marks = char, 0
            continue
        if _unsafe(char):
            out.append(escape(char))
            previous, marks = "\\", 0  # an escape is no base for a mark
            continue
        if unicodedata.category(char)[0] == "M":
            marks += 1
            if marks > MAX_MARKS or not previous or not _base(previous):
                out.append(escape(char))
                continue
        else:
            marks = 0
        out.append(char)
        previous = char
    return "".join(out)


def shortened(
    value: str, max_chars: int = MAX_NAME_CHARS, render: Callable[[str], str] = visible
) -> str:
    """``value`` through ``render`` (:func:`visible`), and when it holds more than
    ``max_chars`` characters, only its start and end: what is left out is said with its
    length (``[...57 of 177 characters...]``)."""
    if len(value) <= max_chars:
        return render(value)
    head, tail = value[: max_chars // 2], value[-(max_chars // 4) :]
    hidden = len(value) - len(head) - len(tail)
    return f"{render(head)}[...{hidden} of {len(value)} characters...]{render(tail)}"


def fold(line: str, width: int) -> list[str]:
    """``line`` (already through :func:`visible`) as rows of at most ``width`` terminal
    cells (at least :data:`MIN_ROW`), every row after the first starting with
    :data:`CONTINUED`; print each as it is, without soft wrap."""
    width = max(width, MIN_ROW)
    rows: list[str] = []
    row, used = "", 0
    for char in line:
        size = cell_len(char)
        if used + size > width:
            rows.append(row)
            row, used = CONTINUED, len(CONTINUED)
        row += char
        used += size
    rows.append(row)
    return rows


def _describe(char: str) -> str:
    category = unicodedata.category(char)
    name = unicodedata.name(char, "")
    word = _CATEGORY_WORDS.get(category, "a character")
    return f"{word} U+{ord(char):04X}" + (f" ({name.lower()})" if name else "")


def problem(value: str, *, max_chars: int = MAX_CHARS) -> str | None:
    """What the rule refuses in ``value`` (a phrase to follow its label), or ``None``."""
    if len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    for index, char in enumerate(value):
        if _unsafe(char):
            return f"contains {_describe(char)} at position {index}"
        if unicodedata.category(char)[0] == "M" and (index == 0 or not _base(value[index - 1])):
            return f"contains a combining mark U+{ord(char):04X} with no letter before it"
    if value != value.strip():
        return "has white space at an end"
    if not unicodedata.is_normalized("NFC", value):
        return "is not in Unicode normal form NFC (write it composed)"
    return None


def check(value: str, label: str, *, max_chars: int = MAX_CHARS) -> None:
    """Refuse ``value`` (called ``label`` in the error) when the rule does.

    Raises:
        TextError: naming ``label`` and the character, never repeating ``value``.
    """
    found = problem(value, max_chars=max_chars)
    if found is not None:
        raise TextError(f"{label} {found}")


class VisibleConsole(Console):
    """A rich ``Console`` whose every rendered text passes :func:`visible`, whatever
    renderable holds it (tables, live progress displays, panels); the console's own control
    segments (a live display's cursor moves) and styles pass as they are."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control:
                yield segment
            else:
                yield Segment(visible(segment.text, newlines=True), segment.style)


def visible_console(**settings: Any) -> Console:
    """The console evalsweep writes to a terminal or a text file a person reads with
    (``settings`` as rich's ``Console`` takes them): a :class:`VisibleConsole`."""
    return VisibleConsole(**settings)

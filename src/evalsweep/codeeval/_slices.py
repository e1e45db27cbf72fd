"""Code-eval slices: a few hundred samples as one self-contained message of at most 5 MB.

A distributed ``code-eval`` cuts its pending samples into slices. A slice is
one JSON document holding the sandbox requests (each test written once per
slice, however many samples share it) and how the worker should run them; it
travels to ``evalsweep code-eval-slice`` on a worker (over ssh stdin, or as a
Ray task argument). The worker answers with one JSON line per event on
stdout: ``start`` (the worker's host, versions and sandbox layers), one line
per verdict the moment it is known, and ``end`` (the worker's usage). A
slice whose worker dies keeps every verdict line that came back.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    FunctionTest,
    Limits,
    SampleVerdict,
)
from evalsweep.jsonl import dumps_text

#: The largest slice message (the common per-transfer limit of sandbox providers).
MAX_SLICE_BYTES = 5_000_000
#: Samples per slice unless the person says otherwise.
DEFAULT_SLICE_SAMPLES = 250
#: The smallest slice the shrinking tail of a run cuts (each slice starts a worker: ~1 s).
MIN_TAIL_SAMPLES = 25
SLICE_VERSION = 1

#: Worker exit status: this machine cannot start a sandbox (never retried elsewhere blindly).
NO_SANDBOX_EXIT = 4


@dataclass
class Slice:
    """Samples judged together on one worker: ``items`` are (position, request)."""

    number: int
    items: list[tuple[int, ExecutionRequest]]
    deaths: int = 0
    expected: float = 0.0
    lineage: str = ""
    done: set[int] = field(default_factory=set)
    _positions: tuple[object, frozenset[int]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def positions(self) -> frozenset[int]:
        """Positions of the samples this slice carries (cached until its items change)."""
        cached = self._positions
        if cached is None or cached[0] is not self.items:
            cached = (self.items, frozenset(position for position, _ in self.items))
            self._positions = cached
        return cached[1]

    def remaining(self) -> list[tuple[int, ExecutionRequest]]:
        return [item for item in self.items if item[0] not in self.done]


def _request_dict(request: ExecutionRequest, tests: dict[FunctionTest, int]) -> dict[str, Any]:
    row: dict[str, Any] = {"program": request.program, "language": request.language}
    if request.test is not None:
        row["test"] = tests.setdefault(request.test, len(tests))
    if request.stdin:
        row["stdin"] = base64.b64encode(request.stdin).decode()
    if request.expected_stdout is not None:
        row["expected_stdout"] = request.expected_stdout
    if request.limits is not None:
        row["limits"] = asdict(request.limits)
    if request.key:
        row["key"] = request.key
    return row


def encode_slice(items: Sequence[tuple[int, ExecutionRequest]], options: dict[str, Any]) -> bytes:
    """The slice message: options, each distinct test once, then the requests by position."""
    tests: dict[FunctionTest, int] = {}
    rows = [[position, _request_dict(request, tests)] for position, request in items]
    test_rows = [asdict(test) for test, _ in sorted(tests.items(), key=lambda kv: kv[1])]
    document = {
        "evalsweep_slice": SLICE_VERSION,
        "options": options,
        "tests": test_rows,
        "requests": rows,
    }
    # The jsonl writer's rule: a completion's lone surrogate is escaped, so it crosses as written.
    return dumps_text(document, separators=(",", ":")).encode()


def decode_slice(data: bytes) -> tuple[dict[str, Any], list[tuple[int, ExecutionRequest]]]:
    """Options and (position, request) pairs of a slice message (ValueError if malformed)."""
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("evalsweep_slice") != SLICE_VERSION:
        raise ValueError(f"not a version {SLICE_VERSION} code-eval slice")
    tests = [
        FunctionTest(
            test=row["test"],
            entry_point=row["entry_point"],
            prelude=row.get("prelude"),
            sample_names=tuple(row.get("sample_names", ())),
        )
        for row in document["tests"]
    ]
    items = []
    for position, row in document["requests"]:
        limits = row.get("limits")
        items.append(
            (
                int(position),
                ExecutionRequest(
                    program=row["program"],
                    language=row.get("language", "python"),
                    test=tests[row["test"]] if "test" in row else None,
                    stdin=base64.b64decode(row["stdin"]) if "stdin" in row else b"",
                    expected_stdout=row.get("expected_stdout"),
                    limits=Limits(**limits) if limits is not None else None,
                    key=row.get("key", ""),
                ),
            )
        )
    return dict(document.get("options", {})), items


def _item_bytes(request: ExecutionRequest) -> int:
    return len(dumps_text(_request_dict(request, {}), separators=(",", ":")).encode()) + 16


def _cap(left: int, max_samples: int, spread: int) -> int:
    """Most samples of the next slice when ``left`` samples are not yet in one."""
    if spread <= 0:
        return max_samples
    return min(max_samples, max(MIN_TAIL_SAMPLES, -(-left // spread)))


def _test_bytes(test: FunctionTest) -> int:
    return len(dumps_text(asdict(test), separators=(",", ":")).encode()) + 4


def cut_slices(
    items: Sequence[tuple[int, ExecutionRequest]],
    max_samples: int = DEFAULT_SLICE_SAMPLES,
    max_bytes: int = MAX_SLICE_BYTES,
    overhead: int = 4096,
    spread: int = 0,
) -> list[list[tuple[int, ExecutionRequest]]]:
    """Consecutive items in slices of at most ``max_samples`` whose message fits ``max_bytes``.

    With ``spread`` (the slices in flight at once), slices shrink toward the end
    of the run: each holds at most ``ceil(left / spread)`` samples, ``left`` being
    the samples not yet in a slice, but never fewer than :data:`MIN_TAIL_SAMPLES`
    (or ``max_samples`` where that is smaller). The run's last slices then end
    close together instead of one full slice finishing alone while the other
    workers wait (guided self-scheduling). Which samples share a slice never
    changes a verdict.

    Raises:
        ValueError: one sample alone (with its test) is larger than ``max_bytes``.
    """
    slices: list[list[tuple[int, ExecutionRequest]]] = []
    current: list[tuple[int, ExecutionRequest]] = []
    tests: set[FunctionTest] = set()
    size = overhead
    cap = _cap(len(items), max_samples, spread)
    for number, item in enumerate(items):
        request = item[1]
        cost = _item_bytes(request)
        if request.test is not None and request.test not in tests:
            cost += _test_bytes(request.test)
        if current and (len(current) >= cap or size + cost > max_bytes):
            cap = _cap(len(items) - number, max_samples, spread)
            slices.append(current)
            current, tests, size = [], set(), overhead
            cost = _item_bytes(request) + (
                _test_bytes(request.test) if request.test is not None else 0
            )
        if overhead + cost > max_bytes:
            raise ValueError(
                f"sample {item[0] + 1} is {cost} bytes with its test: more than a "
                f"{max_bytes}-byte slice can carry"
            )
        current.append(item)
        size += cost
        if request.test is not None:
            tests.add(request.test)
    if current:
        slices.append(current)
    return slices


# -- the worker's answer: one JSON line per event ---------------------------------------------


def verdict_line(position: int, result: ExecutionResult) -> str:
    verdict = result.verdict
    return json.dumps(
        {
            "v": position,
            "s": verdict.status,
            "r": verdict.reason,
            "d": verdict.detail,
            "w": round(result.wall_seconds, 6),
            "c": round(result.cpu_seconds, 6),
            "m": result.max_rss_kb,
        },
        # ASCII: a detail holds what the program raised, lone surrogates included.
        ensure_ascii=True,
    )


def parse_line(text: str) -> tuple[str, Any]:
    """``("verdict", (position, result))``, ``("start", record)``, ``("end", record)``.

    Anything else (a line cut short by a dying worker) is ``("noise", text)``.
    """
    try:
        row = json.loads(text)
    except ValueError:
        return "noise", text
    if not isinstance(row, dict):
        return "noise", text
    if "v" in row:
        try:
            verdict = SampleVerdict(str(row["s"]), str(row["r"]), str(row["d"]))  # type: ignore[arg-type]
            result = ExecutionResult(
                verdict,
                wall_seconds=float(row.get("w", 0.0)),
                cpu_seconds=float(row.get("c", 0.0)),
                max_rss_kb=int(row.get("m", 0)),
            )
            return "verdict", (int(row["v"]), result)
        except (KeyError, TypeError, ValueError):
            return "noise", text
    for kind in ("start", "end"):
        if kind in row and isinstance(row[kind], dict):
            return kind, row[kind]
    return "noise", text


def lines_of(chunks: Iterable[bytes]) -> Iterable[str]:
    """Whole ``\\n``-terminated lines of a byte stream (a last unterminated line is dropped)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *whole, buffer = buffer.split(b"\n")
        for line in whole:
            yield line.decode("utf-8", errors="replace")

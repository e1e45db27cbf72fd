"""The results file of ``code-eval`` and its resume file, written without following links.

Both live in the results file's directory, which is opened once; every later
step names files relative to that descriptor, so the directory cannot be
swapped underneath a run.

* Nothing that exists is ever opened for writing. Each file is created new,
  with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name, and renamed into
  place. A rename replaces a directory entry: a symlink or hard link planted at
  the final name is replaced, never written through. The results file and the
  record are written whole by :mod:`evalsweep._atomic` relative to the directory
  descriptor; the resume file, which stays open and grows while the run lasts, is
  created by :meth:`ResultFiles._create` by the same rule and renamed into place
  at its start.
* The results path must be absent or a regular file of the user's; a symlink,
  a directory or anything else there is refused before anything runs.
* ``<results>.partial`` (one line per verdict as it is known) is reused only
  when it is provably this run's: a regular file of the user's with one link,
  whose header and every verdict line carry an HMAC, under a per-user secret
  key from evalsweep's state directory, over the run's fingerprint (the inputs'
  SHA-256 and the limits) and the line's content. One of the user's for other
  inputs is replaced; anything else (a link, a directory, a file without a
  matching key, an edited line) is renamed aside with a one-line warning, and
  its work is done again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from evalsweep._atomic import atomic_file, atomic_write
from evalsweep.datafiles import MAX_LINE_BYTES, display_path, parse_object
from evalsweep.errors import DataError
from evalsweep.execution import SampleVerdict
from evalsweep.execution._types import STATUSES
from evalsweep.statedir import KeyUnavailable, user_key

PARTIAL_VERSION = 2
KEY_NAME = "code-eval-resume.key"
_FSYNC_EVERY = 256

Warn = Callable[[str], None]


def _mac(key: bytes, *parts: object) -> str:
    message = json.dumps(parts, ensure_ascii=True, separators=(",", ":")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _same_mac(found: object, expected: str) -> bool:
    """Whether ``found`` is the MAC ``expected`` (compared in constant time; any type)."""
    if not isinstance(found, str):
        return False
    return hmac.compare_digest(found.encode("utf-8", "replace"), expected.encode())


def check_results_path(path: Path, inputs: Iterable[Path]) -> None:
    """Refuse, before anything runs, a results path evalsweep would not write."""
    shown = display_path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise DataError(f"results path {shown}: cannot be used ({error.strerror})") from None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise DataError(
                f"results path {shown} is a symbolic link: results are written only to a "
                "plain path (remove the link or choose another --results)"
            )
        if stat.S_ISDIR(info.st_mode):
            raise DataError(f"results path {shown} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"results path {shown} is not a regular file")
        if info.st_uid != os.geteuid():
            raise DataError(f"results path {shown} belongs to another user")
        for source in inputs:
            try:
                same = os.path.samestat(os.stat(source), info)
            except OSError:
                same = False  # an input gone since it was read: not this path
            if same:
                raise DataError(f"results path {shown} is the input file {display_path(source)}")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise DataError(f"results path {shown}: {display_path(parent)} is not a directory")


def write_beside(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` whole, by the rule of every file beside the results: created
    exclusively under a random name (never through a planted link), then renamed
    into place (a link at ``path`` itself is replaced, not followed)."""
    with ResultFiles(path, "", lambda _message: None) as files:
        try:
            atomic_write(files.name, data, mode=mode, dir_fd=files._dir)
        except OSError as error:
            raise DataError(f"{display_path(path)} cannot be written ({error.strerror})") from None


class ResultFiles:
    """``<results>`` and ``<results>.partial`` in one directory opened once."""

    def __init__(self, path: Path, fingerprint: str, warn: Warn) -> None:
        self.path = path
        self.name = path.name
        self.partial_name = f"{path.name}.partial"
        self.partial_path = path.with_name(self.partial_name)
        self._fingerprint = fingerprint
        self._warn = warn
        self._dir = -1
        self._journal: Any = None  # the open .partial, once created
        self._journal_ino: tuple[int, int] | None = None
        self._key: bytes | None = None
        self._since_sync = 0

    # -- the directory ---------------------------------------------------------------------

    def __enter__(self) -> ResultFiles:
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self._dir = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise DataError(
                f"results directory {display_path(parent)} cannot be used ({error.strerror})"
            ) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_journal()
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1

    def _create(self, stem: str, mode: int) -> tuple[int, str]:
        """A new file under a random name beside the results, created exclusively: the
        resume file's, which is renamed into place as the run starts and written to as it
        goes on (not a file written whole, so not :func:`evalsweep._atomic.atomic_file`)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(16):
            name = f".{stem}.{secrets.token_hex(8)}.tmp"
            try:
                return os.open(name, flags, mode, dir_fd=self._dir), name
            except FileExistsError:
                continue  # someone else's name: never touch it, draw another
            except OSError as error:
                raise DataError(
                    f"cannot create a file beside {display_path(self.path)} ({error.strerror})"
                ) from None
        raise DataError(f"cannot create a new file beside {display_path(self.path)}")

    def _lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self._dir, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DataError(
                f"{display_path(self.path.with_name(name))}: cannot be used ({error.strerror})"
            ) from None

    # -- the resume file ---------------------------------------------------------------------

    def start(self, count: int, resume: bool) -> dict[int, SampleVerdict]:
        """Open a new ``.partial`` for this run; the verdicts it may reuse from the old one."""
        try:
            self._key = user_key(KEY_NAME)
        except KeyUnavailable as error:
            self._warn(f"{error}: this run keeps no resume file")
            return {}
        reused: dict[int, SampleVerdict] = {}
        if self._lstat(self.partial_name) is not None:
            found = self._read_partial(count)
            if isinstance(found, str):
                if not self._set_aside(found):
                    return {}
            elif resume:
                reused = found
        fd, temporary = self._create(self.partial_name, 0o600)
        handle = os.fdopen(fd, "w", encoding="utf-8")
        header = {
            "evalsweep_partial": PARTIAL_VERSION,
            "fingerprint": self._fingerprint,
            "mac": _mac(self._key, "header", PARTIAL_VERSION, self._fingerprint),
        }
        handle.write(json.dumps(header) + "\n")
        self._journal = handle
        for index in sorted(reused):
            self.write(index, reused[index])
        handle.flush()
        os.fsync(fd)
        try:
            os.rename(temporary, self.partial_name, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        except OSError as error:
            self._close_journal()
            os.unlink(temporary, dir_fd=self._dir)
            self._warn(
                f"{display_path(self.partial_path)} cannot be replaced ({error.strerror}): "
                "this run keeps no resume file"
            )
            return reused
        info = os.fstat(fd)
        self._journal_ino = (info.st_dev, info.st_ino)
        return reused

    def _set_aside(self, why: str) -> bool:
        aside = f"{self.partial_name}.set-aside-{secrets.token_hex(4)}"
        shown = display_path(self.partial_path)
        try:
            os.rename(self.partial_name, aside, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        except OSError as error:
            self._warn(
                f"{shown} {why} and cannot be set aside ({error.strerror}): "
                "this run keeps no resume file"
            )
            return False
        moved = display_path(self.partial_path.with_name(aside))
        self._warn(f"{shown} {why}: set aside as {moved}; its work is done again")
        return True

    def _read_partial(self, count: int) -> dict[int, SampleVerdict] | str:
        """This run's verdicts in the old ``.partial``; {} if it is ours for other inputs.

        A string says why the file is not provably ours (it is then set aside).
        """
        assert self._key is not None
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.partial_name, flags, dir_fd=self._dir)
        except OSError as error:
            found = self._lstat(self.partial_name)
            if found is not None and stat.S_ISLNK(found.st_mode):
                return "is a symbolic link"
            return f"cannot be read ({error.strerror})"
        info = os.fstat(fd)
        refusal = None
        if not stat.S_ISREG(info.st_mode):
            refusal = "is not a regular file"
        elif info.st_uid != os.geteuid():
            refusal = "belongs to another user"
        elif info.st_nlink != 1:
            refusal = "has other hard links"
        if refusal is not None:
            os.close(fd)
            return refusal
        with os.fdopen(fd, "rb") as handle:
            try:
                header = parse_object(handle.readline(4096).decode("utf-8"))
            except ValueError:
                return "has no evalsweep header"
            fingerprint = header.get("fingerprint")
            version = header.get("evalsweep_partial")
            if not _same_mac(header.get("mac"), _mac(self._key, "header", version, fingerprint)):
                return "does not carry your key (not written by evalsweep for you)"
            if version != PARTIAL_VERSION or fingerprint != self._fingerprint:
                return {}  # yours, for other inputs: replaced
            verdicts: dict[int, SampleVerdict] = {}
            number = 1
            while line := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                if not line.endswith(b"\n"):
                    break  # the last line, cut short when the run stopped
                try:
                    # A verdict's detail holds what the program raised: it may hold a
                    # lone surrogate, which json.dumps wrote as an escape.
                    row = parse_object(line.decode("utf-8"), surrogates=True)
                    verdict = self._verified(row, count)
                except (ValueError, KeyError, TypeError):
                    return f"line {number} does not carry this run's key"
                verdicts[verdict[0]] = verdict[1]
            return verdicts

    def _verified(self, row: dict[str, Any], count: int) -> tuple[int, SampleVerdict]:
        assert self._key is not None
        index, status, reason, detail = row["index"], row["verdict"], row["reason"], row["detail"]
        expected = _mac(self._key, "verdict", self._fingerprint, index, status, reason, detail)
        if not _same_mac(row["mac"], expected):
            raise ValueError("bad mac")
        if not (isinstance(index, int) and 0 <= index < count and status in STATUSES):
            raise ValueError("out of range")
        return index, SampleVerdict(status, str(reason), str(detail))

    def write(self, index: int, verdict: SampleVerdict) -> None:
        """Append one verdict to the ``.partial`` (flushed; fsynced every few hundred)."""
        if self._journal is None or self._key is None:
            return
        row = {
            "index": index,
            "verdict": verdict.status,
            "reason": verdict.reason,
            "detail": verdict.detail,
        }
        row["mac"] = _mac(
            self._key, "verdict", self._fingerprint, index, verdict.status, verdict.reason,
            verdict.detail,
        )  # fmt: skip
        self._journal.write(json.dumps(row) + "\n")
        self._journal.flush()
        self._since_sync += 1
        if self._since_sync >= _FSYNC_EVERY:
            os.fsync(self._journal.fileno())
            self._since_sync = 0

    def _close_journal(self) -> None:
        if self._journal is not None:
            self._journal.flush()
            os.fsync(self._journal.fileno())
            self._journal.close()
            self._journal = None

    # -- the results -----------------------------------------------------------------------

    def write_results(self, rows: Iterable[dict[str, Any]]) -> None:
        """Write the results under a new name, rename it into place, then drop the .partial."""
        try:
            with atomic_file(self.name, mode=0o666, dir_fd=self._dir) as handle:
                for row in rows:
                    handle.write((json.dumps(row) + "\n").encode("utf-8"))
        except OSError as error:
            kept = f"; verdicts so far are in {display_path(self.partial_path)}"
            raise DataError(
                f"results path {display_path(self.path)} cannot be written ({error.strerror})"
                + (kept if self._journal_ino else "")
            ) from None
        self._close_journal()
        if self._journal_ino is not None:
            found = self._lstat(self.partial_name)
            if found is not None and (found.st_dev, found.st_ino) == self._journal_ino:
                os.unlink(self.partial_name, dir_fd=self._dir)
            self._journal_ino = None

"""evalsweep's per-user state directory and the secret keys kept in it.

Location: ``$EVALSWEEP_STATE_DIR``, else ``$XDG_STATE_HOME/evalsweep``
(``~/.local/state/evalsweep``). The directory is created 0700 and must belong
to the user and be writable by no one else; a key in it is created 0600 with
``O_EXCL`` (then linked into place, so two processes agree on one key) and
read with ``O_NOFOLLOW``, and it is used only if it is a regular file of the
user's, readable by no one else, of the right size. Anything else is
:class:`KeyUnavailable`, never a key someone else could know.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from evalsweep._atomic import atomic_write
from evalsweep.datafiles import display_path

KEY_BYTES = 32


class KeyUnavailable(Exception):
    """No trustworthy key can be had; the message says why, in one line."""


def state_dir() -> Path:
    if os.environ.get("EVALSWEEP_STATE_DIR"):
        return Path(os.environ["EVALSWEEP_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "evalsweep"


class NotPrivate(Exception):
    """A folder or file someone else could have placed or changed; the message, one line."""


def open_private_dir(path: Path, *, create: bool) -> int:
    """``path`` opened as a folder (never through a link), created 0700 when ``create``.

    Raises:
        NotPrivate: it cannot be opened, or it is not the user's, or others can write to it
            (they could then swap what is in it).
    """
    shown = display_path(path)
    try:
        if create:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise NotPrivate(f"folder {shown} cannot be used ({error.strerror})") from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        os.close(fd)
        raise NotPrivate(
            f"folder {shown} belongs to another user or others can write to it "
            f"(mode {info.st_mode & 0o777:o}); make it yours and 0700"
        )
    return fd


def open_own_file(directory: int, name: str, flags: int, shown: str) -> int:
    """``name`` in the open folder ``directory``, opened with ``flags`` never through a link
    and never waiting (a FIFO), and kept only if it is a regular file of the user's that no
    one else can read or write.

    Raises:
        FileNotFoundError: there is none.
        NotPrivate: anything else that is not such a file.
    """
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise NotPrivate(f"{shown} cannot be opened ({error.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise NotPrivate(f"{shown} is not a regular file of yours; refusing to use it")
    if info.st_mode & 0o077:
        os.close(fd)
        raise NotPrivate(
            f"{shown} is readable by others (mode {info.st_mode & 0o777:o}); refusing to use it"
        )
    return fd


def _open_private_dir(path: Path) -> int:
    try:
        return open_private_dir(path, create=True)
    except NotPrivate as error:
        raise KeyUnavailable(f"state {error}") from None


def _read_key(directory: int, name: str, shown: str) -> bytes | None:
    """The key, None if there is none yet; KeyUnavailable if the file is not trustworthy
    (not the user's own regular file readable only by them, :func:`open_own_file`, or not
    of the key's size)."""
    try:
        fd = open_own_file(directory, name, os.O_RDONLY, f"key {shown}")
    except FileNotFoundError:
        return None
    except NotPrivate as error:
        raise KeyUnavailable(str(error)) from None
    try:
        if os.fstat(fd).st_size != KEY_BYTES:
            raise KeyUnavailable(f"key {shown} is not a {KEY_BYTES}-byte file")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise KeyUnavailable(f"key {shown} changed while it was read")
    return key


def user_key(name: str) -> bytes:
    """The user's secret key ``name`` in the state directory, created on first use."""
    folder = state_dir()
    shown = display_path(folder / name)
    directory = _open_private_dir(folder)
    try:
        key = _read_key(directory, name, shown)
        if key is not None:
            return key
        try:
            atomic_write(name, secrets.token_bytes(KEY_BYTES), mode=0o600, dir_fd=directory,
                         exclusive=True)  # fmt: skip
        except FileExistsError:
            pass  # another run made it first: use theirs
        except OSError as error:
            raise KeyUnavailable(f"key {shown} cannot be created ({error.strerror})") from None
        key = _read_key(directory, name, shown)
        if key is None:
            raise KeyUnavailable(f"key {shown} vanished as it was created")
        return key
    finally:
        os.close(directory)

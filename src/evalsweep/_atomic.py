"""Files written whole: a reader finds the old file or the new one, never a part of either.

Every file evalsweep writes whole (the secrets and their key, result documents and
reports, code-eval's results and record, exported results pieces and their manifest, the
per-user state keys) is written here, one way:

* the new content goes to a temporary file in the final path's directory, under a random
  name, created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a symlink planted at a name
  someone could guess is never followed, and two writers never share a temporary file;
* the file gets its mode when it is created (``mode``, less the umask as for any new
  file), never by a ``chmod`` afterwards, so a secret is not readable for a moment;
* it is synced, then renamed onto the final path (``os.replace``). A rename replaces a
  directory entry: a symlink at the final path is itself replaced by the file, never
  written through;
* any failure before the rename (a full disk, an exception while the content is produced)
  removes the temporary file and leaves the old file as it was.

``exclusive=True`` places the file only where nothing is yet (a link instead of the
rename, so the file appears whole or not at all) and raises :class:`FileExistsError`
when something is there. ``dir_fd`` names the path relative to a directory the caller
holds open (``code-eval``'s results directory, the state directory), so a directory
swapped underneath cannot redirect the write.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO

#: How a temporary file is opened: new, never through a link, not inherited by children.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Random names tried before giving up (each taken one belongs to someone else).
_TRIES = 16

PathName = str | os.PathLike[str]


def temporary_name(path: PathName) -> str:
    """A fresh random name for a temporary file beside ``path``: ``.<name>.<hex>.tmp``, the
    name cut (on a character boundary) so the whole stays within the 255 bytes a file name
    may take, so any name that can be written can be written through a temporary file."""
    head, tail = os.path.split(os.fspath(path))
    room = 255 - len(f"..{'0' * 16}.tmp")
    kept = (
        os.fsencode(tail)[:room].decode("utf-8", "ignore")
        if len(os.fsencode(tail)) > room
        else tail
    )
    return os.path.join(head, f".{kept}.{secrets.token_hex(8)}.tmp")


@contextlib.contextmanager
def atomic_file(
    path: PathName, *, mode: int = 0o644, dir_fd: int | None = None, exclusive: bool = False
) -> Iterator[BinaryIO]:
    """A binary handle whose content becomes ``path`` when the block ends without error.

    Raises:
        FileExistsError: ``exclusive`` and something is at ``path`` already (nothing is
            written).
        OSError: the file cannot be created, written or placed (nothing is left behind).
    """
    fd, temporary = _create(path, mode, dir_fd)
    placed = False
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            os.link(temporary, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            os.replace(temporary, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            placed = True
    finally:
        if not placed:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=dir_fd)
    _sync_directory(path, dir_fd)


def atomic_write(
    path: PathName,
    data: bytes | str,
    *,
    mode: int = 0o644,
    dir_fd: int | None = None,
    exclusive: bool = False,
) -> None:
    """Write ``data`` (a ``str`` as UTF-8) as the whole of ``path``; see :func:`atomic_file`."""
    content = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_file(path, mode=mode, dir_fd=dir_fd, exclusive=exclusive) as handle:
        handle.write(content)


def _create(path: PathName, mode: int, dir_fd: int | None) -> tuple[int, str]:
    for _ in range(_TRIES):
        name = temporary_name(path)
        try:
            return os.open(name, _CREATE, mode, dir_fd=dir_fd), name
        except FileExistsError:
            continue  # someone else's file: never touch it, draw another name
    raise FileExistsError(f"no free temporary name beside {os.fspath(path)}")


def _sync_directory(path: PathName, dir_fd: int | None) -> None:
    """Make the rename durable; a file system that cannot sync a directory keeps it anyway."""
    with contextlib.suppress(OSError):
        if dir_fd is not None:
            os.fsync(dir_fd)
            return
        directory = os.open(
            os.path.dirname(os.fspath(path)) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        )
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

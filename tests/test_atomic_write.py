"""Files written whole (``evalsweep._atomic``): never through a planted link, with their mode
from creation, the old file intact after any failure, no two writers sharing a temporary."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsweep import _atomic
from evalsweep._atomic import atomic_file, atomic_write


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _entries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_writes_the_whole_content_with_the_mode_given_at_creation(
    tmp_path: Path, umask_zero: None
) -> None:
    atomic_write(tmp_path / "key", b"\x00secret", mode=0o600)
    atomic_write(tmp_path / "report.md", "é\n", mode=0o666)
    assert (tmp_path / "key").read_bytes() == b"\x00secret"
    assert (tmp_path / "report.md").read_bytes() == "é\n".encode()
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == 0o666
    os.umask(0o022)
    atomic_write(tmp_path / "report.md", "again", mode=0o666)  # as open() would: umask applies
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == 0o644
    assert _entries(tmp_path) == ["key", "report.md"]


def test_a_link_planted_at_the_temporary_name_is_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim, absent = tmp_path / "victim", tmp_path / "absent"
    victim.write_text("keep")
    folder = tmp_path / "out"
    folder.mkdir()
    # The names a writer will draw, known in advance: links there, to a file and to nothing.
    draws = iter(["aa", "bb", "cc"])
    monkeypatch.setattr(_atomic.secrets, "token_hex", lambda _n: next(draws))
    (folder / ".doc.json.aa.tmp").symlink_to(victim)
    (folder / ".doc.json.bb.tmp").symlink_to(absent)
    atomic_write(folder / "doc.json", "new", mode=0o600)
    assert victim.read_text() == "keep" and not absent.exists()
    assert (folder / "doc.json").read_text() == "new"
    assert not (folder / "doc.json").is_symlink()
    assert (folder / ".doc.json.aa.tmp").is_symlink() and (folder / ".doc.json.bb.tmp").is_symlink()
    assert not (folder / ".doc.json.cc.tmp").exists()  # the one it used is gone


def test_every_drawn_name_taken_is_an_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_atomic.secrets, "token_hex", lambda _n: "same")
    (tmp_path / ".doc.same.tmp").symlink_to(tmp_path / "victim")
    with pytest.raises(FileExistsError):
        atomic_write(tmp_path / "doc", "x")
    assert _entries(tmp_path) == [".doc.same.tmp"] and not (tmp_path / "victim").exists()


def test_a_link_at_the_final_path_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "secrets.json").symlink_to(victim)
    atomic_write(tmp_path / "secrets.json", "{}", mode=0o600)
    assert victim.read_text() == "keep"
    assert not (tmp_path / "secrets.json").is_symlink()
    assert (tmp_path / "secrets.json").read_text() == "{}"


def test_a_failure_while_writing_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(path) as handle:
        handle.write(b"half of the n")
        raise RuntimeError("the producer failed")
    assert path.read_text() == "old" and _entries(tmp_path) == ["results.json"]


def test_a_file_too_large_for_the_system_keeps_the_old_file(tmp_path: Path) -> None:
    """A real write error midway (the file-size limit: EFBIG, as a full disk gives ENOSPC)."""
    path = tmp_path / "results.json"
    path.write_text("old")
    script = (
        "import resource, signal, sys\n"
        "from evalsweep._atomic import atomic_write\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        "    atomic_write(sys.argv[1], b'x' * 100_000)\n"
        "except OSError as error:\n"
        "    print(error.strerror)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    assert ran.stdout.strip() == os.strerror(27)  # EFBIG
    assert path.read_text() == "old" and _entries(tmp_path) == ["results.json"]


def test_exclusive_places_only_where_nothing_is(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    atomic_write(path, b"first", mode=0o600, exclusive=True)
    with pytest.raises(FileExistsError):
        atomic_write(path, b"second", mode=0o600, exclusive=True)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        atomic_write(tmp_path / "dangling", b"third", exclusive=True)
    assert path.read_bytes() == b"first" and not (tmp_path / "nowhere").exists()
    assert _entries(tmp_path) == ["dangling", "secrets.key"]


def test_relative_to_a_directory_held_open(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    directory = os.open(tmp_path / "a", os.O_RDONLY | os.O_DIRECTORY)
    try:
        (tmp_path / "a").rename(tmp_path / "b")  # moved: the handle still names it
        (tmp_path / "a").mkdir()
        atomic_write("results.jsonl", "row\n", dir_fd=directory)
    finally:
        os.close(directory)
    assert (tmp_path / "b" / "results.jsonl").read_text() == "row\n"
    assert _entries(tmp_path / "a") == [] and _entries(tmp_path / "b") == ["results.jsonl"]


def test_two_writers_at_once_keep_their_own_temporaries(tmp_path: Path) -> None:
    path = tmp_path / "doc"
    with atomic_file(path) as first:
        first.write(b"first, ")
        (mine,) = _entries(tmp_path)  # the first writer's temporary, still open
        atomic_write(path, b"second")  # a second writer comes and goes meanwhile
        assert path.read_bytes() == b"second" and mine in _entries(tmp_path)
        first.write(b"whole")
    assert path.read_bytes() == b"first, whole" and _entries(tmp_path) == ["doc"]


def test_concurrent_writers_and_a_reader_see_only_whole_files(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    writer = (
        "import json, sys\n"
        "from evalsweep._atomic import atomic_write\n"
        "for round in range(60):\n"
        "    body = json.dumps({'writer': sys.argv[2], 'round': round, 'pad': 'x' * 50_000})\n"
        "    atomic_write(sys.argv[1], body)\n"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", writer, str(path), str(n)]) for n in range(4)
    ]
    seen = set()
    while any(process.poll() is None for process in writers):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        seen.add(json.loads(text)["writer"])  # a torn file would not parse
    assert [process.wait() for process in writers] == [0, 0, 0, 0]
    final = json.loads(path.read_text())
    assert final["round"] == 59 and final["writer"] in {"0", "1", "2", "3"}
    assert seen <= {"0", "1", "2", "3"}
    assert _entries(tmp_path) == ["doc.json"]


def test_temporary_names_are_hidden_beside_the_file_and_fresh() -> None:
    names = {_atomic.temporary_name("/d/x.json") for _ in range(100)}
    assert len(names) == 100
    assert all(n.startswith("/d/.x.json.") and n.endswith(".tmp") for n in names)


def test_a_name_as_long_as_a_file_name_may_be_is_written(tmp_path: Path) -> None:
    for name in ("r" * 251 + ".md", "é" * 127):  # 255 bytes each
        atomic_write(tmp_path / name, "whole")
        assert (tmp_path / name).read_text() == "whole"
        assert len(os.fsencode(os.path.basename(_atomic.temporary_name(tmp_path / name)))) <= 255
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r" * 251 + ".md", "é" * 127])

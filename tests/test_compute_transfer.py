"""Results moved between stores lose nothing, whatever characters their text holds.

Rows whose text holds every character Unicode or Python treats as a line break
(``\\n \\r \\r\\n \\v \\f \\x1c \\x1d \\x1e \\x85 \\u2028 \\u2029``) and other odd text travel
through every path that moves results: pieces written and read in process, the
export-results / import-results commands, a Ray worker's pieces, the ssh target
against a real sshd on loopback, and an MCP job run there. After each trip the
rows are compared with the original's in full, every column of SQLite's
``samples`` table but ``created`` (when the row was written).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from evalsweep.compute import (
    MANIFEST,
    PieceError,
    SSHTarget,
    SweepJob,
    export_pieces,
    import_piece,
)
from evalsweep.compute._transfer import row_pieces
from evalsweep.engine import SilentProgress, SweepSpec, run_sweep
from evalsweep.errors import DataError, StoreError, TargetError
from evalsweep.jsonl import dumps_line, iter_values
from evalsweep.store import SampleRecord, Store
from test_compute_ssh import Sshd, _config, _target, sshd  # noqa: F401 - the loopback sshd

DATA = Path(__file__).parent / "data" / "transfer"
BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
ODD = "".join(BREAKS) + "\t😀e\u0301مرحبا\u200d\ufeff\\n\"'\x7f\x9b\ufffd\uffff"
TASK_FILES = [str(DATA / "odd_choice.yaml"), str(DATA / "odd_generate.yaml")]
MMLU = ["mmlu_management", "mmlu_sociology", "mmlu_college_mathematics"]
TASKS = [*TASK_FILES, *MMLU]
TASK_NAMES = ["odd_choice", "odd_generate", *MMLU]
COLUMNS = (
    "checkpoint, backend, task, settings, doc_key, doc_id, subject, request_hash, requests, "
    "responses, target, prediction, correct, response, metrics, details, document"
)


def full_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every stored row, every column but the time it was written, in a fixed order."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(f"SELECT {COLUMNS} FROM samples ORDER BY 1, 2, 3, 4, 5").fetchall()


def keys(path: Path) -> dict[str, tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {k: (kind, value) for k, kind, value in conn.execute("SELECT * FROM keys")}


def same_store(original: Path, copy: Path) -> None:
    """``copy`` holds exactly the original's rows, and the keys they point to."""
    rows = full_rows(original)
    assert full_rows(copy) == rows and rows
    wanted, copied = keys(original), keys(copy)
    for key in {row[1] for row in rows} | {row[3] for row in rows}:
        assert copied[key] == wanted[key]


def _evalsweep(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalsweep", *args],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def original(
    tmp_path_factory: pytest.TempPathFactory, gpt2_a: Path, gpt2_b: Path
) -> tuple[Path, list[str]]:
    """A store with two checkpoints' rows of the odd tasks and the MMLU rows holding U+0085."""
    path = tmp_path_factory.mktemp("original") / "original.sqlite"
    checkpoints = [str(gpt2_a), str(gpt2_b)]
    with Store(path) as store:
        run_sweep(SweepSpec(checkpoints, TASKS, str(DATA)), store)
    return path, checkpoints


def test_the_original_rows_hold_every_odd_character(original: tuple[Path, list[str]]) -> None:
    text = "".join(_strings(full_rows(original[0])))
    assert all(char in text for char in [*BREAKS, "😀", "\ufeff"])
    assert {row[2] for row in full_rows(original[0])} == set(TASK_NAMES)
    assert len(full_rows(original[0])) == 2 * (12 + 12 + 3 + 2 + 2)


def _strings(value: Any) -> list[str]:
    """Every string in stored rows, JSON columns decoded."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return [value]
        return [value] if isinstance(decoded, str | int | float) else _strings(decoded)
    if isinstance(value, dict):
        return [*_strings(list(value)), *_strings(list(value.values()))]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _strings(item)]
    return []


def _record(doc: int, text: str) -> SampleRecord:
    return SampleRecord(
        checkpoint="local:sha256:abc", backend="backend:1", task="odd", settings="task:1",
        doc_key=f"odd:{doc}{text}", doc_id=doc, subject=text, request_hash=f"h{doc}",
        requests=[{"kind": "generate_until", "context": text * 20, "lone": "\udc80\ud800"}],
        responses=[text], target=text, prediction=text[::-1], correct=doc % 2 == 0,
        response=text, metrics={"em": 1.0}, details={text: [text, None, 1.5]},
        document={"question": text, "choices": BREAKS, "lone surrogate \udfff": "\udc80"},
    )  # fmt: skip


def _odd_store(path: Path, count: int = 24) -> list[SampleRecord]:
    with Store(path) as store:
        store.remember_reference("org/m", {"reference": "org/m", "identity": "local:sha256:abc"})
        store.remember_key("backend:1", "backend", {"dtype": ODD})
        store.remember_key("task:1", "task", {"task": "odd", "text": ODD})
        store.write([_record(i, BREAKS[i % len(BREAKS)] + ODD) for i in range(count)])
        return list(store.records())


def test_pieces_carry_every_odd_character_and_lone_surrogates(tmp_path: Path) -> None:
    expected = _odd_store(tmp_path / "a.sqlite")
    with Store(tmp_path / "a.sqlite") as remote:
        pieces = export_pieces(remote, ["org/m"], ["odd"], tmp_path / "out", 3000)
    assert len(pieces) > 5
    for piece in pieces:
        data = (tmp_path / "out" / piece.name).read_bytes()
        # One row per b"\n"-ended line; the Unicode line separators are escaped on the way out,
        # so even a reader that splits at them reads each piece right.
        assert data.count(b"\n") == piece.rows == len(data.decode().splitlines())
        assert not any(sep.encode() in data for sep in ("\x85", "\u2028", "\u2029"))
    with Store(tmp_path / "b.sqlite") as local:
        for piece in pieces:
            data = (tmp_path / "out" / piece.name).read_bytes()
            import_piece(local, data, piece.sha256, name=piece.name, expected_rows=piece.rows)
        assert list(local.records()) == expected
        assert local.lookup_key("task:1") == {"task": "odd", "text": ODD}
    same_store(tmp_path / "a.sqlite", tmp_path / "b.sqlite")


def test_a_piece_with_raw_line_separators_and_crlf_ends_reads_whole(tmp_path: Path) -> None:
    """What another writer may send: U+0085/U+2028/U+2029 raw inside strings, \\r\\n line ends."""
    expected = _odd_store(tmp_path / "a.sqlite", count=11)
    lines = [{"type": "sample", **r.__dict__} for r in expected]
    raw = b""
    for line in lines:
        text = json.dumps(line, ensure_ascii=False)  # raw separators; lone surrogates escaped:
        text = text.replace("\udc80", "\\udc80").replace("\ud800", "\\ud800")
        text = text.replace("\udfff", "\\udfff")
        raw += text.encode() + b"\r\n"
    assert b"\xe2\x80\xa8" in raw and b"\xc2\x85" in raw
    assert len(raw.decode().splitlines()) > len(lines)  # what the old reader split it into
    with Store(tmp_path / "b.sqlite") as local:
        assert import_piece(local, raw, name="raw.jsonl") == 11
        assert list(local.records()) == expected


def test_export_and_import_commands_round_trip_a_real_sweep(
    original: tuple[Path, list[str]], tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path, checkpoints = original
    out = tmp_path / "pieces"
    exported = _evalsweep(
        ["export-results", *checkpoints, "--tasks", ",".join(TASKS), "--store", str(path),
         "--out", str(out), "--max-bytes", "20000", "--json"],
        cli_env,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    listed = json.loads(exported.stdout)["pieces"]
    assert len(listed) > 2
    assert json.loads((out / MANIFEST).read_text())["pieces"] == listed
    # Named one by one (checked against the manifest beside them) ...
    by_file = _evalsweep(
        ["import-results", *(str(out / p["name"]) for p in listed), "--store",
         str(tmp_path / "files.sqlite")],
        cli_env,
    )  # fmt: skip
    assert by_file.returncode == 0, by_file.stderr
    assert f"from {len(listed)} pieces" in by_file.stdout
    same_store(path, tmp_path / "files.sqlite")
    # ... or as their folder.
    by_folder = _evalsweep(
        ["import-results", str(out), "--store", str(tmp_path / "folder.sqlite")], cli_env
    )
    assert by_folder.returncode == 0, by_folder.stderr
    same_store(path, tmp_path / "folder.sqlite")
    # ... or as a shell expands pieces/*: the manifest among them, in the shell's order.
    by_glob = _evalsweep(
        ["import-results", *sorted(str(p) for p in out.iterdir()), "--store",
         str(tmp_path / "glob.sqlite")],
        cli_env,
    )  # fmt: skip
    assert by_glob.returncode == 0, by_glob.stderr
    assert f"from {len(listed)} pieces" in by_glob.stdout
    same_store(path, tmp_path / "glob.sqlite")


def _one_line_error(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 2, (ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr
    lines = [line for line in ran.stderr.split("\n") if line.strip()]
    assert len(lines) == 1, ran.stderr
    return lines[0]


def test_a_bad_piece_is_named_with_its_line_and_the_import_resumes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    _odd_store(tmp_path / "a.sqlite")
    with Store(tmp_path / "a.sqlite") as store:
        pieces = export_pieces(store, ["org/m"], ["odd"], tmp_path / "out", 12_000)
    out, target = tmp_path / "out", tmp_path / "b.sqlite"
    assert len(pieces) > 3 and pieces[2].rows >= 2
    bad = out / pieces[2].name
    good = bad.read_bytes()
    lines = good.split(b"\n")
    lines[1] = lines[1][: len(lines[1]) // 2]  # line 2 of the third piece, cut in the middle
    bad.write_bytes(b"\n".join(lines))
    command = ["import-results", *(str(out / p.name) for p in pieces), "--store", str(target)]

    # With the manifest: the piece differs from the sha256 the export wrote.
    message = _one_line_error(_evalsweep(command, cli_env))
    assert str(bad) in message and "sha256" in message
    assert "the rows of the 2 pieces before it are stored" in message and "resume" in message
    assert len(full_rows(target)) == pieces[0].rows - 1 + pieces[1].rows  # less the reference

    # Pieces moved without their manifest: the line itself is named.
    (out / MANIFEST).unlink()
    message = _one_line_error(_evalsweep(command, cli_env))
    assert f"{bad} line 2" in message and "malformed" in message and "resume" in message

    # The piece sent again: the same command finishes the import.
    bad.write_bytes(good)
    again = _evalsweep(command, cli_env)
    assert again.returncode == 0, again.stderr
    same_store(tmp_path / "a.sqlite", target)


def test_cut_damaged_unlisted_and_missing_pieces_are_refused_whole(tmp_path: Path) -> None:
    _odd_store(tmp_path / "a.sqlite", count=6)
    with Store(tmp_path / "a.sqlite") as store:
        (piece,) = export_pieces(store, ["org/m"], ["odd"], tmp_path / "out")
    data = (tmp_path / "out" / piece.name).read_bytes()
    with Store(tmp_path / "b.sqlite") as local:
        with pytest.raises(PieceError, match=r"p\.jsonl line 9: is cut short"):
            import_piece(local, data[:-5], name="p.jsonl")
        with pytest.raises(PieceError, match="sha256 differs"):
            import_piece(local, data[:-5], piece.sha256, name="p.jsonl")
        with pytest.raises(PieceError, match="holds 8 lines, the export wrote 9"):
            import_piece(local, data.split(b"\n", 1)[1], name="p.jsonl", expected_rows=9)
        wrong = data.replace(b'"doc_id": 0', b'"doc_id": "0"', 1)
        with pytest.raises(PieceError, match=r"line \d: is malformed: .*'doc_id' is str"):
            import_piece(local, wrong, name="p.jsonl")
        assert list(local.records()) == []
    from evalsweep.compute import pieces_to_import

    (tmp_path / "out" / "piece-00007.jsonl").write_bytes(data)
    with pytest.raises(StoreError, match="piece-00007.jsonl: not listed in .*manifest.json"):
        pieces_to_import([tmp_path / "out" / "piece-00007.jsonl"])
    (tmp_path / "out" / piece.name).unlink()
    with pytest.raises(StoreError, match="piece-00000.jsonl: missing"):
        pieces_to_import([tmp_path / "out"])


def test_ray_worker_pieces_carry_every_odd_row(
    original: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """A Ray worker's answer (pieces with sha256 and lines) after Ray's pickling, imported."""
    with Store(original[0]) as store:
        records = list(store.records())
    answer = pickle.loads(pickle.dumps({"pieces": row_pieces(records, 20_000)}))
    assert len(answer["pieces"]) > 2
    with Store(tmp_path / "ray.sqlite") as local:
        for number, (data, sha256, rows) in enumerate(answer["pieces"]):
            import_piece(local, data, sha256, name=f"{number}", expected_rows=rows)
    # Sample rows only: the keys they point to are the driver's own.
    assert full_rows(tmp_path / "ray.sqlite") == full_rows(original[0])


def test_sweep_over_ssh_lands_every_odd_row_in_the_local_store(
    sshd: Sshd,  # noqa: F811
    original: tuple[Path, list[str]],
    tmp_path: Path,
) -> None:
    path, checkpoints = original
    spec = SweepSpec(checkpoints, TASKS, str(DATA))
    job = SweepJob(spec)
    target = _target(sshd, tmp_path / "remote")
    with Store(tmp_path / "pulled.sqlite") as store:
        ran = target.run(job, store, SilentProgress())
        transfers = [e for e in store.audit_entries(kind="transfer") if "piece-" in e["text"]]
    assert ran.compute["kind"] == "ssh" and transfers
    same_store(path, tmp_path / "pulled.sqlite")


def test_a_bad_piece_over_ssh_names_it_and_the_same_command_resumes(
    sshd: Sshd,  # noqa: F811
    original: tuple[Path, list[str]],
    tmp_path: Path,
) -> None:
    path, checkpoints = original
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "results.sqlite").write_bytes(path.read_bytes())  # the host has every row
    spec = SweepSpec(checkpoints, TASK_FILES, str(DATA))
    job = SweepJob(spec)
    # A connection that damages the pieces it carries (here: drops their first line).
    target = _Damaging(**_target(sshd, remote).__dict__)
    with Store(tmp_path / "pulled.sqlite") as store, pytest.raises(TargetError) as raised:
        target.run(job, store, SilentProgress())
    message = str(raised.value)
    assert "\n" not in message and "127.0.0.1:" in message and "piece-00000.jsonl" in message
    assert "resume" in message
    again = _target(sshd, remote)
    with Store(tmp_path / "pulled.sqlite") as store:
        again.run(job, store, SilentProgress())
    odd = [row for row in full_rows(path) if row[2] in ("odd_choice", "odd_generate")]
    assert full_rows(tmp_path / "pulled.sqlite") == odd


@dataclass
class _Damaging(SSHTarget):
    """The real ssh target, but each piece comes back without its first line."""

    def ssh_argv(self, remote_command: str) -> list[str]:
        if remote_command.startswith("cat "):
            remote_command = "tail -n +2 " + remote_command.removeprefix("cat ")
        return super().ssh_argv(remote_command)


@pytest.mark.anyio
async def test_mcp_job_over_ssh_lands_every_odd_row(
    sshd: Sshd,  # noqa: F811
    original: tuple[Path, list[str]],
    tmp_path: Path,
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp import Client

    from evalsweep.agent import approve_quote, build_server

    path, checkpoints = original
    config = _config(tmp_path / "config.toml", sshd, tmp_path / "remote")
    with config.open("a") as handle:
        handle.write("[limits]\nper_connection_usd = 5.0\nglobal_usd = 5.0\n")
        # An agent names task files only from the folders the person allows.
        handle.write(f"[agent]\ntask_dirs = [{json.dumps(str(DATA.resolve()))}]\n")
    monkeypatch.setenv("EVALSWEEP_CONFIG", str(config))
    monkeypatch.setenv("EVALSWEEP_DATA_DIR", str(DATA))
    args = {"checkpoints": checkpoints, "tasks": TASK_FILES, "target": "box"}
    async with Client(build_server(store_path)) as client:
        quote = _ok(await client.call_tool("quote_sweep", args))
        with Store(store_path) as store:
            approve_quote(store, quote["quote_id"], "the person, in a test")
        started = _ok(await client.call_tool("start_sweep", {"quote_id": quote["quote_id"]}))
        job_id = started["job_id"]
        with anyio.fail_after(600):
            while (status := _ok(await client.call_tool("job_status", {"job_id": job_id})))[
                "status"
            ] == "running":
                await anyio.sleep(0.5)
        table = _ok(await client.call_tool("results_table", {"job_id": job_id}))
    assert status["status"] == "finished", status
    assert {r["task"] for r in table["results"]} >= {"odd_choice", "odd_generate"}
    odd = [row for row in full_rows(path) if row[2] in ("odd_choice", "odd_generate")]
    assert full_rows(store_path) == odd
    # The job's samples.jsonl holds every row's text whole, one line per row.
    with Store(store_path) as store:
        out_dir = Path(
            store.connection.execute(
                "SELECT out_dir FROM agent_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
        )
    samples = [value for _, value in iter_values((out_dir / "samples.jsonl").read_bytes())]
    assert len(samples) == len(odd)
    assert {s["target"] for s in samples} >= {row[10] for row in odd if row[2] == "odd_generate"}


def _ok(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content[0].text
    return dict(call.structured_content)


def test_task_data_with_a_lone_surrogate_is_one_clear_error(tmp_path: Path) -> None:
    from evalsweep.tasks._data import read_jsonl

    path = tmp_path / "data.jsonl"
    path.write_bytes(
        b'{"q": "fine\\u2028"}\n{"q": "bad \\\\ud800 is text"}\n{"q": "bad \\ud800"}\n'
    )
    with pytest.raises(DataError, match=r"data\.jsonl:3: .*lone surrogate"):
        read_jsonl(path, ["q"])
    assert read_jsonl(path, ["q"], limit=2)[1] == {"q": "bad \\ud800 is text"}
    path.write_bytes(b'{"q": 1}\n{"q": "\xff"}\n')
    with pytest.raises(DataError, match=r"data\.jsonl:2: not valid UTF-8"):
        read_jsonl(path, ["q"])


def test_the_store_names_a_row_whose_text_is_not_unicode(tmp_path: Path) -> None:
    record = _record(0, "x")
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(StoreError, match=r"the target of odd document 'y' holds a lone"):
            store.write([record, replace(record, doc_key="y", target="\udc80")])
        assert list(store.records()) == []
        store.write([record])  # a lone surrogate inside JSON columns is kept exactly
        assert list(store.records()) == [record]


@pytest.mark.parametrize("char", [*BREAKS, "\ud800", ODD])
def test_every_reader_keeps_a_line_whole(char: str, tmp_path: Path) -> None:
    """The one line rule, per character: written by dumps_line, read back unchanged by
    evalsweep's own reader, and by the strict reader of a person's input files (which
    refuses a lone surrogate, naming the line)."""
    from evalsweep.datafiles import read_records
    from evalsweep.importers._lm_eval import _read_jsonl
    from evalsweep.tasks._data import read_jsonl

    value = {"task_id": f"a{char}b", "completion": f"x = 1{char}y = 2", "n": [char]}
    path = tmp_path / "f.jsonl"
    path.write_bytes(dumps_line(value) + dumps_line({"task_id": "2"}))
    assert [v for _, v in iter_values(path.read_bytes())] == [value, {"task_id": "2"}]
    if "\ud800" <= char[0] <= "\udfff":
        with pytest.raises(DataError, match=r"f\.jsonl:1: .*lone surrogate"):
            read_records(path, lines=True)
        return
    assert [r.value for r in read_records(path, lines=True).records] == [value, {"task_id": "2"}]
    assert [row for _, row in _read_jsonl(path)] == [value, {"task_id": "2"}]
    assert read_jsonl(path, ["task_id"]) == [value, {"task_id": "2"}]


def test_hellaswag_text_format_keeps_carriage_returns_inside_a_line(tmp_path: Path) -> None:
    from evalsweep.tasks.hellaswag import read_text_format

    item = ["ctx\rwith\x85odd\u2028text", "1", "end a\r", "end\x0cb", "end c", "end d"]
    path = tmp_path / "h.txt"
    path.write_bytes(("\n".join(item) + "\r\n" + "\n".join(item) + "\n").encode())
    items = read_text_format(path)
    assert len(items) == 2 and items[0] == items[1]  # a "\r\n" end is a line end
    assert items[0]["query"] == "ctx\rwith\x85odd\u2028text"
    assert items[0]["choices"][1] == "end\x0cb" and items[0]["gold"] == 1

"""The pieces every target shares: the audited command runner, the spend meter, results
moved in pieces of at most 5 MB, and progress streamed as lines."""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import sys
from pathlib import Path

import pytest

from evalsweep.compute import CommandRunner, SpendMeter, export_pieces, import_piece
from evalsweep.compute._stream import LineProgress, relay
from evalsweep.compute._transfer import MAX_PIECE_BYTES
from evalsweep.errors import StoreError
from evalsweep.store import SampleRecord, Store


def test_runner_records_exact_text_exit_code_and_output_size(store_path: Path) -> None:
    seen: list[str] = []
    script = "import sys; print('result'); print('working', file=sys.stderr); sys.exit(3)"
    with Store(store_path) as store:
        ran = CommandRunner(store, "box").run(
            [sys.executable, "-c", script], on_line=seen.append, detail={"why": "test"}
        )
        (entry,) = store.audit_entries()
    assert ran.exit_code == 3 and ran.stdout == b"result\n" and seen == ["working"]
    assert entry["text"] == ran.text  # the exact command line, as a shell would read it
    assert shlex.split(entry["text"]) == [sys.executable, "-c", script]
    assert entry["exit_code"] == 3 and entry["output_bytes"] == ran.output_bytes == 15
    assert entry["target"] == "box" and entry["detail"] == {"why": "test"}
    assert entry["ended"] >= entry["started"]


def test_runner_passes_env_and_keeps_secret_values_out_of_the_log_and_output(
    store_path: Path, tmp_path: Path
) -> None:
    from evalsweep.secrets import SecretBox

    box = SecretBox(tmp_path / "secrets")
    box.set("HUB_TOKEN", "hf_s3cr3t_value")
    script = "import os, sys; print(os.environ['HUB_TOKEN']); print(sys.argv[1], file=sys.stderr)"
    argv = [sys.executable, "-c", script, "hf_s3cr3t_value"]
    seen: list[str] = []
    with Store(store_path) as store:
        runner = CommandRunner(store, "box", redact=box.redact)
        ran = runner.run(argv, env={**box.environment(), "PATH": "/usr/bin"}, on_line=seen.append)
        plain = runner.run([sys.executable, "-c", "print('no secret here')"])
        entries = store.audit_entries()
    assert ran.exit_code == 0 and ran.stdout == b"[secret HUB_TOKEN]\n"
    assert ran.stderr == b"[secret HUB_TOKEN]\n" and seen == ["[secret HUB_TOKEN]"]
    audited = shlex.join(argv).replace("hf_s3cr3t_value", "[secret HUB_TOKEN]")
    assert entries[0]["text"] == audited == ran.text
    assert entries[0]["output_bytes"] == ran.output_bytes == 2 * len(b"hf_s3cr3t_value\n")
    assert "hf_s3cr3t_value" not in json.dumps(entries)
    # A command holding no secret is recorded exactly.
    assert entries[1]["text"] == shlex.join([sys.executable, "-c", "print('no secret here')"])
    assert plain.stdout == b"no secret here\n"


def test_runner_kills_a_command_at_its_time_limit(store_path: Path) -> None:
    with Store(store_path) as store:
        ran = CommandRunner(store, "box").run(
            [sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5
        )
        (entry,) = store.audit_entries()
    assert ran.exit_code == 124 and entry["exit_code"] == 124


def test_runner_audits_library_calls_and_their_failures(store_path: Path) -> None:
    with Store(store_path) as store:
        runner = CommandRunner(store, "cloud")
        with runner.call("launch", "sky.launch(...)") as call:
            call.output_bytes = 42
        with pytest.raises(RuntimeError), runner.call("stop", "sky.stop('c')"):
            raise RuntimeError("provider said no")
        entries = store.audit_entries(target="cloud")
    assert [(e["kind"], e["exit_code"], e["output_bytes"]) for e in entries] == [
        ("launch", 0, 42),
        ("stop", 1, 0),
    ]


def test_spend_accrues_per_second_after_the_providers_minimum() -> None:
    meter = SpendMeter(hourly_rate=3.6, minimum_seconds=60)
    assert meter.spent() == 0.0  # nothing before it starts
    meter.start(now=1000.0)
    assert meter.billed_seconds(now=1010.0) == 60  # the minimum
    assert meter.spent(now=1010.0) == pytest.approx(0.06)
    assert meter.elapsed_seconds(now=1100.2) == 101  # whole seconds, rounded up
    assert meter.spent(now=1100.2) == pytest.approx(0.101)
    meter.stop(now=1200.0)
    assert meter.as_dict()["spend"] == pytest.approx(0.2) and meter.as_dict()["seconds"] == 200
    assert meter.describe() == "spent 0.2000 USD (200 s at 3.60/h)"


def _record(doc: int, size: int = 100) -> SampleRecord:
    return SampleRecord(
        checkpoint="local:sha256:abc", backend="backend:1", task="gsm8k", settings="task:1",
        doc_key=f"gsm8k:{doc}", doc_id=doc, subject=None, request_hash=f"h{doc}",
        requests=[{"kind": "generate_until", "context": "Q" * size}], responses=["A"],
        target="4", prediction="4", correct=doc % 2 == 0, response="A", metrics={"em": 1.0},
        details={}, document={"question": "x" * size},
    )  # fmt: skip


def test_results_move_in_pieces_below_the_limit_with_their_keys(tmp_path: Path) -> None:
    with Store(tmp_path / "remote.sqlite") as remote:
        remote.remember_reference("org/m@main", {"reference": "org/m@main",
                                                 "identity": "local:sha256:abc"})  # fmt: skip
        remote.remember_key("backend:1", "backend", {"dtype": "float32"})
        remote.remember_key("task:1", "task", {"task": "gsm8k", "num_fewshot": 5})
        remote.write([_record(i, size=400) for i in range(30)])
        pieces = export_pieces(remote, ["org/m@main"], ["gsm8k"], tmp_path / "out", 4000)
        expected = list(remote.records())
    assert len(pieces) > 3 and all(p.bytes <= 4000 for p in pieces)
    assert sum(p.rows for p in pieces) == 30 + 3  # rows, the reference, two settings keys
    with Store(tmp_path / "local.sqlite") as local:
        for piece in pieces:
            data = (tmp_path / "out" / piece.name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == piece.sha256
            import_piece(local, data, piece.sha256)
        assert list(local.records()) == expected
        assert local.lookup_reference("org/m@main")["identity"] == "local:sha256:abc"
        assert local.lookup_key("task:1") == {"task": "gsm8k", "num_fewshot": 5}
    assert MAX_PIECE_BYTES == 5_000_000


def test_a_damaged_piece_is_refused_whole(tmp_path: Path) -> None:
    with Store(tmp_path / "remote.sqlite") as remote:
        remote.remember_reference("r", {"reference": "r", "identity": "local:sha256:abc"})
        remote.write([_record(i) for i in range(3)])
        (piece,) = export_pieces(remote, ["r"], ["gsm8k"], tmp_path / "out")
    data = (tmp_path / "out" / piece.name).read_bytes()
    with Store(tmp_path / "local.sqlite") as local:
        with pytest.raises(StoreError, match="damaged"):
            import_piece(local, data[:-10], piece.sha256)
        assert list(local.records()) == []


class _Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, label: str, total: int) -> None:
        self.events.append(("start", (label, total)))

    def advance(self, count: int) -> None:
        self.events.append(("advance", count))

    def finish(self) -> None:
        self.events.append(("finish", None))

    def note(self, message: str) -> None:
        self.events.append(("note", message))


def test_progress_lines_replay_into_local_progress() -> None:
    stream = io.StringIO()
    remote = LineProgress(stream, interval=0.0)
    remote.note("loading ./ckpt")
    remote.start("ckpt · gsm8k", 10)
    remote.advance(4)
    remote.finish()
    local = _Recorded()
    for line in [*stream.getvalue().splitlines(), "a plain log line"]:
        relay(line, local, "box: ")
    assert local.events == [
        ("note", "box: loading ./ckpt"),
        ("start", ("box: ckpt · gsm8k", 10)),
        ("advance", 4),
        ("finish", None),
        ("note", "box: a plain log line"),
    ]
    assert all(json.loads(line.split(" ", 1)[1]) for line in stream.getvalue().splitlines())


def test_export_and_import_commands_move_rows_between_stores(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    import subprocess

    with Store(tmp_path / "a.sqlite") as store:
        store.remember_reference("org/m", {"reference": "org/m", "identity": "local:sha256:abc"})
        store.write([_record(i) for i in range(5)])
        expected = list(store.records())
    evalsweep = [sys.executable, "-m", "evalsweep"]
    exported = subprocess.run(
        [*evalsweep, "export-results", "org/m", "--tasks", "gsm8k", "--store",
         str(tmp_path / "a.sqlite"), "--out", str(tmp_path / "pieces"), "--json"],
        capture_output=True, text=True, env=cli_env, check=True,
    )  # fmt: skip
    names = [p["name"] for p in json.loads(exported.stdout)["pieces"]]
    imported = subprocess.run(
        [*evalsweep, "import-results", *(str(tmp_path / "pieces" / n) for n in names),
         "--store", str(tmp_path / "b.sqlite")],
        capture_output=True, text=True, env=cli_env, check=True,
    )  # fmt: skip
    assert "imported 5 rows" in imported.stdout
    with Store(tmp_path / "b.sqlite") as store:
        assert list(store.records()) == expected

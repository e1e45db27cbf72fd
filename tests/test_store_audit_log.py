"""The audit log lives in the results store and ``evalsweep audit`` lists it."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, run_cli_process
from evalsweep.store import Store


def test_audit_entries_round_trip_and_cli_lists_them(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        entry = store.audit_begin("command", "ssh gpu1 'nvidia-smi -L'", target="gpu1")
        store.audit_end(entry, exit_code=0, output_bytes=123)
        store.audit_event("refusal", "start_sweep: quote q-1 already used", detail={"quote": "q-1"})
        entries = store.audit_entries()
    assert [e["kind"] for e in entries] == ["command", "refusal"]
    assert entries[0]["exit_code"] == 0 and entries[0]["output_bytes"] == 123
    assert entries[0]["ended"] >= entries[0]["started"]
    assert entries[1]["detail"] == {"quote": "q-1"}

    out = run_cli(
        ["audit", "--store", str(path), "--json"],
        env=cli_env, check=True,
    )  # fmt: skip
    listed = json.loads(out.stdout)
    assert [e["text"] for e in listed] == [
        "ssh gpu1 'nvidia-smi -L'",
        "start_sweep: quote q-1 already used",
    ]
    # the table as a 200-column terminal shows it: the width is read when the process starts
    only = run_cli_process(
        ["audit", "--store", str(path), "--kind", "command"], env={**cli_env, "COLUMNS": "200"}
    )
    assert only.returncode == 0, only.stderr
    assert "nvidia-smi -L" in only.stdout and "already used" not in only.stdout

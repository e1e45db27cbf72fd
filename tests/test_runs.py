"""A training run as a reference: expansion, step order, selection, incomplete checkpoints.

The run folder is written by a real transformers ``Trainer`` (a tiny GPT-2, saving
``checkpoint-N`` folders with ``trainer_state.json`` and optimizer files), and its
checkpoints are also copied under the other names frameworks use. The Hub listing
goes through ``huggingface_hub``'s own ``list_repo_refs`` against a real HTTP
server on loopback that answers its ``/refs`` request with data this test gives.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import run_cli
from evalsweep.errors import CheckpointError, ConfigError
from evalsweep.report import document_json, parse_document, render_trend
from evalsweep.runs import Selection, expand_references, incomplete, step_of

SUBJECT_TASK = "mmlu_high_school_geography"


def train_run(out: Path, tokenizer: Any, *, max_steps: int, save_steps: int) -> Path:
    """A tiny GPT-2 trained by transformers' Trainer, saving every ``save_steps`` steps."""
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )

    from evalsweep.demo._build import EOS

    torch.manual_seed(0)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=1, n_head=2,
        bos_token_id=eos, eos_token_id=eos,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    ids = tokenizer("The answer is A. The answer is B.")["input_ids"]
    rows = [{"input_ids": ids, "labels": ids} for _ in range(8)]
    arguments = TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        save_steps=save_steps,
        per_device_train_batch_size=2,
        learning_rate=5e-3,
        report_to=[],
        use_cpu=True,
        logging_strategy="no",
        disable_tqdm=True,
        save_safetensors=True,
    )
    Trainer(
        model=model,
        args=arguments,
        train_dataset=rows,
        processing_class=tokenizer,
        data_collator=default_data_collator,  # rows of one length: nothing to pad
    ).train()
    return out


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """checkpoint-4, checkpoint-8, checkpoint-12: their names sort out of step order."""
    return train_run(tmp_path_factory.mktemp("trainer") / "run1", tokenizer, max_steps=12,
                     save_steps=4)  # fmt: skip


def test_the_trainer_wrote_what_trainer_writes(trainer_run: Path) -> None:
    folders = sorted(p.name for p in trainer_run.iterdir() if p.is_dir())
    assert folders == ["checkpoint-12", "checkpoint-4", "checkpoint-8"]
    for name in folders:
        files = {p.name for p in (trainer_run / name).iterdir()}
        assert {"config.json", "model.safetensors", "trainer_state.json", "optimizer.pt"} <= files


def test_a_trainer_run_folder_expands_in_step_order(trainer_run: Path) -> None:
    expansion = expand_references([str(trainer_run)])
    assert expansion.references == [f"{trainer_run}/checkpoint-{n}" for n in (4, 8, 12)]
    assert list(expansion.steps.values()) == [4, 8, 12]
    assert expansion.one_run and not expansion.skipped and not expansion.notes


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("checkpoint-1000", 1000), ("step-5", 5), ("step143000", 143000),
        ("global_step20", 20), ("iter_0000300", 300), ("epoch3", 3), ("run-2-ckpt-3", None),
        ("final", None),
    ],
)  # fmt: skip
def test_step_names(name: str, step: int | None) -> None:
    assert step_of(name) == step


def test_differently_named_steps_expand_by_their_numbers(trainer_run: Path, tmp_path: Path) -> None:
    source = trainer_run / "checkpoint-4"
    for name in ("iter_0000100", "step10", "global_step20", "step-5", "notes"):
        shutil.copytree(source, tmp_path / name)
    (tmp_path / "logs.txt").write_text("not a checkpoint")
    expansion = expand_references([str(tmp_path)])
    assert [Path(r).name for r in expansion.references] == [
        "step-5", "step10", "global_step20", "iter_0000100",
    ]  # fmt: skip


def test_two_folders_of_one_step_are_refused(trainer_run: Path, tmp_path: Path) -> None:
    shutil.copytree(trainer_run / "checkpoint-4", tmp_path / "step-4")
    shutil.copytree(trainer_run / "checkpoint-4", tmp_path / "checkpoint-4")
    with pytest.raises(CheckpointError, match="both step 4"):
        expand_references([str(tmp_path)])


@pytest.mark.parametrize(
    ("steps", "every", "last", "kept"),
    [
        ("200:600", None, None, [200, 300, 400, 500, 600]),
        (":300", None, None, [100, 200, 300]),
        ("800:", None, None, [800, 900, 1000]),
        ("100:1000:300", None, None, [100, 400, 700, 1000]),
        (None, 3, None, [100, 400, 700, 1000]),
        (None, None, 2, [900, 1000]),
        ("200:800", 2, 2, [600, 800]),
    ],
)
def test_selection(steps: str | None, every: int | None, last: int | None, kept: list[int]) -> None:
    all_steps = list(range(100, 1001, 100))
    chosen = Selection.from_options(steps, every, last).apply(all_steps)
    assert [all_steps[i] for i in chosen] == kept


@pytest.mark.parametrize("steps", ["1:2:3:4", "a:b", "5", "9:3", "1:9:0"])
def test_a_bad_steps_value_is_one_clear_error(steps: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"--steps {steps!r}")):
        Selection.from_options(steps)


def test_selection_applies_to_a_run_folder(trainer_run: Path) -> None:
    expansion = expand_references([str(trainer_run)], Selection.from_options("5:", None, None))
    assert [expansion.steps[r] for r in expansion.references] == [8, 12]
    expansion = expand_references([str(trainer_run)], Selection(last=1))
    assert [expansion.steps[r] for r in expansion.references] == [12]
    with pytest.raises(CheckpointError, match="keeps none of its 3 checkpoints"):
        expand_references([str(trainer_run)], Selection.from_options("100:200", None, None))


def test_a_selection_without_a_run_is_refused(trainer_run: Path) -> None:
    with pytest.raises(ConfigError, match="select from a run folder"):
        expand_references([str(trainer_run / "checkpoint-4")], Selection(last=1))


def test_incomplete_checkpoints_are_named_and_left_out(trainer_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trainer_run, run)
    # A sharded save with one shard not written yet.
    sharded = run / "checkpoint-16"
    shutil.copytree(run / "checkpoint-12", sharded)
    (sharded / "model.safetensors").rename(sharded / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    # Trainer's folder while it saves, then a weight file cut short, then no config yet.
    shutil.copytree(run / "checkpoint-4", run / "tmp-checkpoint-20")
    cut = run / "checkpoint-24"
    shutil.copytree(run / "checkpoint-4", cut)
    weights = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (run / "checkpoint-28").mkdir()
    expansion = expand_references([str(run)])
    assert [expansion.steps[r] for r in expansion.references] == [4, 8, 12]
    skipped = {Path(name).name: why for name, why in expansion.skipped}
    assert skipped["checkpoint-16"] == "shard model-00002-of-00002.safetensors missing (1 of 2)"
    assert skipped["tmp-checkpoint-20"] == "save in progress"
    assert "shorter than its header" in skipped["checkpoint-24"]
    assert skipped["checkpoint-28"] == "no config.json yet"
    assert incomplete(run / "checkpoint-8") is None


def test_checkpoints_given_one_by_one_are_put_in_step_order_once_said(trainer_run: Path) -> None:
    given = [str(trainer_run / f"checkpoint-{n}") for n in (12, 4, 8)]
    expansion = expand_references(given)
    assert expansion.references == sorted(given, key=lambda r: int(r.rsplit("-", 1)[1]))
    said = f"the 3 checkpoints are one run ({trainer_run}): shown in step order"
    assert expansion.notes == [said]
    # In step order already: nothing to say. Of two folders: not a run, left as given.
    assert expand_references(expansion.references).notes == []
    mixed = [given[0], str(trainer_run)]
    assert expand_references(mixed[:1]).references == mixed[:1]


# --- the Hub, through huggingface_hub's own code ------------------------------------------


class _Refs(BaseHTTPRequestHandler):
    refs: dict[str, Any] = {}
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        self.asked.append(self.path)
        if self.path.split("?")[0] != "/api/models/org/model/refs":
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.end_headers()
            return
        body = json.dumps(self.refs).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A loopback server answering ``/api/models/org/model/refs``; huggingface_hub pointed at it."""
    from huggingface_hub import constants
    from huggingface_hub.utils import reset_sessions

    def ref(name: str, kind: str) -> dict[str, str]:
        return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": f"{len(name):040x}"}

    _Refs.refs = {
        "branches": [ref(n, "heads") for n in ("main", "step143000", "step1000", "step20000")],
        "tags": [ref("step512", "tags"), ref("v1.0", "tags")],
        "converts": [],
    }
    _Refs.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    reset_sessions()
    try:
        yield _Refs.asked
    finally:
        server.shutdown()
        thread.join()
        monkeypatch.undo()
        reset_sessions()


def test_hub_step_branches_and_tags_expand_in_step_order(hub: list[str]) -> None:
    expansion = expand_references(["org/model@step*"])
    assert expansion.references == [
        "org/model@step512", "org/model@step1000", "org/model@step20000", "org/model@step143000",
    ]  # fmt: skip
    assert hub == ["/api/models/org/model/refs"]
    last = expand_references(["org/model@step*"], Selection.from_options("1000:30000", None, None))
    assert last.references == ["org/model@step1000", "org/model@step20000"]


def test_a_hub_pattern_matching_nothing_or_no_repository_is_one_error(hub: list[str]) -> None:
    with pytest.raises(CheckpointError, match="no branch or tag of org/model matches 'ckpt-\\*'"):
        expand_references(["org/model@ckpt-*"])
    with pytest.raises(CheckpointError, match="'org/other@step\\*': no such repository"):
        expand_references(["org/other@step*"])


def test_the_hub_offline_is_one_line_naming_the_run() -> None:
    ran = run_cli(["run", "org/model@step*", "--tasks", "mmlu"])
    assert ran.returncode == 2
    assert ran.stderr.strip() == (
        "evalsweep: error: run 'org/model@step*': cannot list its branches (HF_HUB_OFFLINE is set)"
    )


def test_hub_steps_given_one_by_one_are_put_in_step_order() -> None:
    expansion = expand_references(["org/model@step3000", "org/model@step200"])
    assert expansion.references == ["org/model@step200", "org/model@step3000"]
    assert expansion.notes == ["the 2 checkpoints are one run (org/model): shown in step order"]


# --- the command line ------------------------------------------------------------------------


def test_run_on_a_run_folder_shows_the_trend(
    trainer_run: Path, data_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "results.sqlite"
    ran = run_cli(
        ["run", trainer_run, "--tasks", SUBJECT_TASK, "--limit", "8", "--num-fewshot", "0",
         "--data-dir", data_dir, "--device", "cpu", "--store", store, "--no-color"],
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout
    rows = [line for line in out.splitlines() if re.match(r"\s*\d+\s+checkpoint-", line)]
    assert [int(line.split()[0]) for line in rows] == [4, 8, 12]
    assert "(baseline)" in rows[0]
    assert re.search(r"n=8\s+[▁▂▃▄▅▆▇█]{3}", out)
    assert "Δ = candidate - baseline (checkpoint-4) or the checkpoint before, in points" in out
    shown = run_cli(
        ["compare", trainer_run, "--tasks", SUBJECT_TASK, "--store", store, "--json"], check=True
    )
    document = json.loads(shown.stdout)
    read = parse_document(shown.stdout, "compare")  # schema 3: steps and previous read back
    assert parse_document(document_json(read), "again") == read
    # On a terminal of 100 columns every checkpoint's row stays whole, on one line.
    console = Console(width=100, record=True, color_system=None)
    console.print(render_trend(parse_document(shown.stdout, "compare")))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert [line.split()[:2] for line in lines if re.match(r"\s*\d+ ", line)] == [
        ["4", "checkpoint-4"], ["8", "checkpoint-8"], ["12", "checkpoint-12"],
    ]  # fmt: skip
    assert document["steps"] == {f"{trainer_run}/checkpoint-{n}": n for n in (4, 8, 12)}
    assert [(c["baseline"][-2:], c["candidate"][-2:]) for c in document["previous"]] == [
        ("-8", "12")
    ]
    against_first = {(c["baseline"][-2:], c["candidate"][-2:]) for c in document["comparisons"]}
    assert against_first == {("-4", "-8"), ("-4", "12")}

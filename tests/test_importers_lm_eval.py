"""``evalsweep import-lm-eval`` on real lm-evaluation-harness output.

lm-eval itself runs here (once per module, on two tiny checkpoints, with its
own ``arc_easy`` and ``gsm8k`` task YAMLs pointed at the local data files);
its ``--log_samples`` output is imported, then compared, listed as flips and
reported by evalsweep.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Ran, run_cli
from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.tasks.arc import ai2_rows_in_hub_schema

pytestmark = [pytest.mark.slow, pytest.mark.integration]
LIMIT = 4


def installed_yaml(*parts: str) -> dict[str, Any]:
    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / Path(*parts)
    config: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return config


def write_local_tasks(data_dir: Path, folder: Path) -> None:
    """lm-eval's own arc_easy and gsm8k YAMLs, reading the local files instead of the Hub."""
    folder.mkdir(parents=True)
    rows = ai2_rows_in_hub_schema(data_dir / "arc" / "ARC-Easy" / "ARC-Easy-Test.jsonl", 20)
    arc_data = folder / "arc_test.jsonl"
    arc_data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    arc = installed_yaml("arc", "arc_easy.yaml")
    arc.update(
        task="imp_arc_easy",
        tag=["imp_tests"],
        dataset_path="json",
        dataset_kwargs={"data_files": {"test": str(arc_data)}},
        training_split=None,
        validation_split=None,
    )
    arc.pop("dataset_name")
    (folder / "imp_arc_easy.yaml").write_text(yaml.safe_dump(arc), encoding="utf-8")
    gsm = installed_yaml("gsm8k", "gsm8k.yaml")
    gsm.update(
        task="imp_gsm8k",
        dataset_path="json",
        dataset_kwargs={
            "data_files": {s: str(data_dir / "gsm8k" / f"{s}.jsonl") for s in ("train", "test")}
        },
        generation_kwargs={**gsm["generation_kwargs"], "max_gen_toks": 16},
    )
    gsm.pop("dataset_name")
    gsm.pop("tag", None)
    (folder / "imp_gsm8k.yaml").write_text(yaml.safe_dump(gsm), encoding="utf-8")


@dataclass
class Imported:
    folder: Path
    store: Path
    outputs: dict[str, Path]
    env: dict[str, str]


def evalsweep(args: list[str], env: dict[str, str]) -> Ran:
    return run_cli(args, env=env)


@pytest.fixture(scope="module")
def lm_eval_logs(
    tmp_path_factory: pytest.TempPathFactory,
    gpt2_a: Path,
    gpt2_b: Path,
    data_dir: Path,
    cli_env: dict[str, str],
) -> Imported:
    root = tmp_path_factory.mktemp("lm_eval_logs")
    write_local_tasks(data_dir, root / "tasks")
    # Both lm-eval runs at once: most of each is its start-up, on one core.
    outputs, running = {}, {}
    for name, checkpoint in (("a", gpt2_a), ("b", gpt2_b)):
        outputs[name] = out = root / "logs" / name
        log = (root / f"{name}.log").open("w")
        running[name] = subprocess.Popen(
            [
                sys.executable, "-m", "lm_eval", "--model", "hf",
                "--model_args", f"pretrained={checkpoint},dtype=float32", "--device", "cpu",
                "--tasks", "imp_arc_easy,imp_gsm8k", "--include_path", str(root / "tasks"),
                "--limit", str(LIMIT), "--log_samples", "--output_path", str(out),
            ],
            env=cli_env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        log.close()  # the child writes through its own copy
    for name, process in running.items():
        process.wait(timeout=900)
        assert process.returncode == 0, (root / f"{name}.log").read_text()[-3000:]
    store = root / "store.sqlite"
    return Imported(root / "logs", store, outputs, cli_env)


def lm_eval_results(folder: Path) -> dict[str, Any]:
    (path,) = folder.rglob("results_*.json")
    results: dict[str, Any] = json.loads(path.read_text())
    return results


def lm_eval_samples(folder: Path, task: str) -> list[dict[str, Any]]:
    (path,) = folder.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def imported(lm_eval_logs: Imported) -> Imported:
    done = evalsweep(
        ["import-lm-eval", str(lm_eval_logs.folder), "--store", str(lm_eval_logs.store), "--json"],
        lm_eval_logs.env,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)
    assert len(runs) == 2
    for run in runs:
        assert run["tasks"] == {"imp_arc_easy": LIMIT, "imp_gsm8k": LIMIT}
    return lm_eval_logs


def test_imported_model_has_the_identity_evalsweep_gives_the_folder(
    lm_eval_logs: Imported, gpt2_a: Path, gpt2_b: Path
) -> None:
    done = evalsweep(
        ["import-lm-eval", str(lm_eval_logs.outputs["a"]), "--store", str(lm_eval_logs.store),
         "--json"],
        lm_eval_logs.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)
    assert run["checkpoint"]["identity"] == resolve_checkpoint(str(gpt2_a)).identity
    assert run["checkpoint"]["identity"] != resolve_checkpoint(str(gpt2_b)).identity


def test_compare_pairs_imported_scores_and_reproduces_lm_eval_aggregates(
    imported: Imported, gpt2_a: Path, gpt2_b: Path
) -> None:
    done = evalsweep(
        ["compare", str(gpt2_a), str(gpt2_b), "--tasks", "imp_arc_easy,imp_gsm8k",
         "--store", str(imported.store), "--json"],
        imported.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    for name, checkpoint in (("a", gpt2_a), ("b", gpt2_b)):
        theirs = lm_eval_results(imported.outputs[name])["results"]
        mine = {
            (r["task"], r["metric"]): r
            for r in document["results"]
            if r["checkpoint"] == str(checkpoint)
        }
        for task, metric, key in (
            ("imp_arc_easy", "acc", "acc,none"),
            ("imp_arc_easy", "acc_norm", "acc_norm,none"),
            ("imp_gsm8k", "exact_match,strict-match", "exact_match,strict-match"),
            ("imp_gsm8k", "exact_match,flexible-extract", "exact_match,flexible-extract"),
        ):
            assert mine[(task, metric)]["n"] == LIMIT
            assert mine[(task, metric)]["value"] == pytest.approx(theirs[task][key], abs=1e-12)
    compared = {(c["task"], c["metric"]) for c in document["comparisons"]}
    assert ("imp_arc_easy", "acc") in compared and ("imp_gsm8k", "exact_match,strict-match") in (
        compared
    )


def test_flips_list_the_questions_whose_lm_eval_acc_changed(
    imported: Imported, gpt2_a: Path, gpt2_b: Path
) -> None:
    done = evalsweep(
        ["flips", str(gpt2_b), "--baseline", str(gpt2_a), "--tasks", "imp_arc_easy",
         "--store", str(imported.store), "--json"],
        imported.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    flips = {row["doc_id"]: row["direction"] for row in json.loads(done.stdout)}
    a = {s["doc_id"]: s["acc"] for s in lm_eval_samples(imported.outputs["a"], "imp_arc_easy")}
    b = {s["doc_id"]: s["acc"] for s in lm_eval_samples(imported.outputs["b"], "imp_arc_easy")}
    expected = {d: ("regressed" if a[d] > b[d] else "fixed") for d in a if a[d] != b[d]}
    assert flips == expected


def test_report_writes_markdown_for_imported_results(
    imported: Imported, gpt2_a: Path, gpt2_b: Path, tmp_path: Path
) -> None:
    out = tmp_path / "summary.md"
    done = evalsweep(
        ["report", str(gpt2_a), str(gpt2_b), "--tasks", "imp_arc_easy", "--markdown", str(out),
         "--store", str(imported.store)],
        imported.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "imp_arc_easy" in out.read_text()


def test_imported_lm_eval_scores_equal_evalsweep_own_per_question(
    imported: Imported, gpt2_a: Path, data_dir: Path, tmp_path: Path
) -> None:
    done = evalsweep(
        ["run", str(gpt2_a), "--tasks", "arc_easy", "--limit", str(LIMIT), "--data-dir",
         str(data_dir), "--device", "cpu", "--dtype", "float32", "--store",
         str(tmp_path / "own.db"), "--out", str(tmp_path / "out")],
        imported.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    theirs = {s["doc_id"]: s for s in lm_eval_samples(imported.outputs["a"], "imp_arc_easy")}
    assert len(own) == LIMIT
    for row in own:
        lm = theirs[row["doc_id"]]
        assert row["metrics"] == {"acc": lm["acc"], "acc_norm": lm["acc_norm"]}
        lls = [float(r[0][0]) for r in lm["resps"]]
        assert row["logprobs"] == pytest.approx(lls, rel=1e-5)


def test_folder_without_lm_eval_output_is_a_one_line_error(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    done = evalsweep(["import-lm-eval", str(tmp_path), "--store", str(tmp_path / "s.db")], cli_env)
    assert done.returncode == 2
    assert "no lm-eval results_*.json" in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1


def test_results_without_log_samples_say_so(
    lm_eval_logs: Imported, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    (results,) = lm_eval_logs.outputs["a"].rglob("results_*.json")
    (tmp_path / results.name).write_bytes(results.read_bytes())
    done = evalsweep(["import-lm-eval", str(tmp_path), "--store", str(tmp_path / "s.db")], cli_env)
    assert done.returncode == 2
    assert "--log_samples" in done.stderr


def test_hub_models_are_compared_by_the_name_lm_eval_recorded(
    lm_eval_logs: Imported, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A model lm-eval loaded from the Hub is not looked up: it keeps lm-eval's name."""
    for name, hub_id in (("a", "example-org/model-x"), ("b", "example-org/model-y")):
        folder = tmp_path / "logs" / name
        folder.mkdir(parents=True)
        for source in lm_eval_logs.outputs[name].rglob("*.json*"):
            (folder / source.name).write_bytes(source.read_bytes())
        (results_path,) = folder.glob("results_*.json")
        results = json.loads(results_path.read_text())
        results["config"]["model_args"] = f"pretrained={hub_id},dtype=float32"
        results["model_name"] = hub_id
        results_path.write_text(json.dumps(results))
    store = str(tmp_path / "hub.db")
    done = evalsweep(
        ["import-lm-eval", str(tmp_path / "logs"), "--store", store, "--json"], cli_env
    )
    assert done.returncode == 0, done.stderr
    identities = {run["checkpoint"]["identity"] for run in json.loads(done.stdout)}
    assert identities == {"lm-eval:example-org/model-x", "lm-eval:example-org/model-y"}
    compare = evalsweep(
        ["compare", "example-org/model-x", "example-org/model-y", "--tasks", "imp_arc_easy",
         "--store", store, "--json"],
        cli_env,
    )  # fmt: skip
    assert compare.returncode == 0, compare.stderr
    document = json.loads(compare.stdout)
    theirs = lm_eval_results(lm_eval_logs.outputs["a"])["results"]["imp_arc_easy"]["acc,none"]
    mine = [
        r["value"]
        for r in document["results"]
        if r["checkpoint"] == "example-org/model-x" and r["metric"] == "acc"
    ]
    assert mine == [pytest.approx(theirs, abs=1e-12)]

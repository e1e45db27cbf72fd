"""Third-party progress bars and warnings stay off what ``evalsweep run`` and ``watch`` print.

The checkpoint is a real one that makes every library speak: its weights are in
shards (transformers draws a "Loading checkpoint shards" bar), its generation
config sets a flag greedy decoding ignores (transformers logs that "generation flags
are not valid") and its modeling code, loaded with ``--trust-remote-code``, warns
through Python's ``warnings`` as deprecated code does (a FutureWarning). With
``--debug`` all of it reaches stderr, which shows the checkpoint really produces it;
without, only evalsweep's own lines do.

Our own model code must not call what transformers announces it will remove: the
backend's paths (full forward, prefix reuse, the reserved and plain decode loops) and
the demo's training run in a process where a FutureWarning is an error and
transformers logs its warnings.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Ran, run_cli_process

pytestmark = pytest.mark.slow

TASK = ["--tasks", "arc_easy", "--limit", "2", "--device", "cpu", "--trust-remote-code"]

#: What a third-party bar, log warning or Python warning leaves in the output.
NOISE = re.compile(
    r"Loading|it/s\]|s/it\]|Writing|Warning|warning:|FutureWarning|DeprecationWarning|"
    r"deprecated|generation flags|%\|"
)

MODELING = '''\
import warnings

from transformers import GPT2LMHeadModel


class NoisyGPT2(GPT2LMHeadModel):
    """GPT-2 as remote code that still calls something its authors deprecated."""

    def __init__(self, config):
        warnings.warn(
            "NoisyGPT2's init is deprecated and will be removed in version 9", FutureWarning
        )
        super().__init__(config)
'''


@pytest.fixture(scope="module")
def noisy(gpt2_a: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gpt2_a`` saved so that loading it makes transformers and its code speak."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("noisy") / "noisy-gpt2"
    model = AutoModelForCausalLM.from_pretrained(gpt2_a, dtype=torch.float32)
    model.save_pretrained(out, max_shard_size="100KB", safe_serialization=True)
    AutoTokenizer.from_pretrained(gpt2_a).save_pretrained(out)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # a bar is drawn for several shards only
    generation = json.loads((out / "generation_config.json").read_text())
    generation.update(do_sample=False, temperature=0.5)
    (out / "generation_config.json").write_text(json.dumps(generation))
    (out / "modeling_noisy.py").write_text(MODELING)
    config = json.loads((out / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_noisy.NoisyGPT2"}
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture
def env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The CLI's environment, with remote code cached under this test's folder."""
    return {**cli_env, "HF_HOME": str(tmp_path / "hf-home"), "NO_COLOR": "1"}


def _noise(ran: Ran) -> list[str]:
    return [line for line in (ran.stdout + ran.stderr).splitlines() if NOISE.search(line)]


def test_run_shows_its_own_progress_and_no_third_party_output(
    noisy: Path, data_dir: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    args = ["run", noisy, *TASK, "--data-dir", data_dir]
    ran = run_cli_process([*args, "--store", tmp_path / "r.sqlite"], env=env)
    assert ran.returncode == 0, ran.stderr
    assert _noise(ran) == []
    assert f"loading {noisy}" in ran.stderr
    assert re.search(r"arc_easy: 8/8 done in ", ran.stderr)
    assert "evalsweep results" in ran.stdout and "noisy-gpt2" in ran.stdout

    # The same run with --debug (a new store: the model is loaded again) lets the libraries
    # through: the checkpoint does make all that noise.
    loud = run_cli_process(
        [*args, "--store", tmp_path / "again.sqlite", "--debug"],
        env={**env, "HF_HOME": str(tmp_path / "other")},
    )
    assert loud.returncode == 0, loud.stderr
    said = "\n".join(_noise(loud))
    for expected in ("Loading checkpoint shards", "it/s]", "generation flags", "FutureWarning"):
        assert expected in said, loud.stderr


def test_watch_shows_its_verdicts_and_no_third_party_output(
    noisy: Path, gpt2_b: Path, data_dir: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(gpt2_b, run / "checkpoint-100")
    shutil.copytree(noisy, run / "checkpoint-200")
    args = ["watch", run, *TASK, "--data-dir", data_dir, "--store", tmp_path / "r.sqlite"]
    ran = run_cli_process([*args, "--interval", 0.1, "--settle", 0, "--idle-exit", 0], env=env)
    assert ran.returncode == 0, ran.stderr
    assert _noise(ran) == []
    assert re.search(r"^step 200: arc_easy \(acc\)", ran.stdout, re.MULTILINE), ran.stdout
    assert "no new checkpoint for 0 s; stopping" in ran.stderr


OUR_CALLS = """
import dataclasses
import sys
from pathlib import Path

from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.demo._run import LESSONS, Lesson, train_checkpoints
from evalsweep.models import BackendOptions, load_backend
from evalsweep.models._arch import PLAIN_DECODE
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest

context = "Question: which of these is a planet?\\nAnswer:" * 4
for path in sys.argv[2:]:
    for reuse in (True, False):
        options = BackendOptions(device="cpu", prefix_reuse=reuse)
        backend = load_backend("hf", resolve_checkpoint(path), options)
        asked = [LoglikelihoodRequest(context + str(i), " Mars") for i in range(4)]
        assert len(backend.loglikelihood(asked)) == 4
        prompts = [GenerationRequest(context + str(i), ("\\n",), 6) for i in range(3)]
        assert len(backend.generate_until(prompts)) == 3
        backend.plan = dataclasses.replace(backend.plan, generation=PLAIN_DECODE)
        assert len(backend.generate_until(prompts[:1])) == 1
        backend.close()
lesson = Lesson(LESSONS[0].what, LESSONS[0].slice, 2)
assert len(train_checkpoints(Path(sys.argv[1]), lessons=[lesson])) == 1
print("done")
"""


def test_our_model_calls_use_no_api_transformers_announces_it_will_remove(
    gpt2_a: Path, llama_checkpoint: Path, gpt_neo_checkpoint: Path, tmp_path: Path,
    cli_env: dict[str, str],
) -> None:  # fmt: skip
    env = {**cli_env, "TRANSFORMERS_VERBOSITY": "warning", "PYTHONWARNINGS": ""}
    paths = [gpt2_a, llama_checkpoint, gpt_neo_checkpoint]
    done = subprocess.run(
        [sys.executable, "-W", "error::FutureWarning", "-W", "error::DeprecationWarning"]
        + ["-c", textwrap.dedent(OUR_CALLS), str(tmp_path / "demo"), *map(str, paths)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    announced = [
        line
        for line in done.stderr.splitlines()
        if re.search(r"deprecat|will be removed|FutureWarning", line, re.IGNORECASE)
    ]
    assert announced == [], done.stderr

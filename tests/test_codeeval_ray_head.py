"""``run`` and ``code-eval`` against a Ray cluster started apart, with token authentication.

The head runs in its own process (``ray.init`` there with ``RAY_AUTH_MODE=token``
and a token in its environment, as ``ray start --head`` does on a cluster
with token authentication) and the ``evalsweep`` commands are separate
processes that connect to its GCS address. Without the token, or with a
wrong one, the cluster refuses them and the command says so in one line; with
the token kept as an evalsweep secret they run (Ray has imported and read its
settings before evalsweep hands the token over), the samples see none of the
Ray workers' variables, and the token's value appears nowhere they write.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
PROBLEMS = Path(__file__).parent / "data" / "code_eval_distributed" / "HumanEval-first8.jsonl"
HEAD = (
    "import sys, time, ray\n"
    "ray.init(num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1], log_to_driver=False,\n"
    "         _node_ip_address='127.0.0.1')\n"
    "print(ray.get_runtime_context().gcs_address, flush=True)\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)
SEES_NO_RAY_VARIABLE = (
    "    import os\n"
    "    assert not [name for name in os.environ if name.startswith('RAY')], 'sees Ray'\n"
)


@dataclass
class Head:
    address: str
    token: str


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A real Ray head with token authentication, in a process of its own."""
    root = tmp_path_factory.mktemp("rayhead")
    token = secrets.token_hex(16)
    env = {
        **os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "HOME": str(root),
        "PYTHONPATH": SRC, "RAY_enable_metrics_collection": "0",
    }  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD, str(root / "t")],
        stdout=subprocess.PIPE, stderr=(root / "head.err").open("wb"), env=env,
        start_new_session=True,
    )  # fmt: skip
    assert head.stdout is not None
    line = head.stdout.readline().decode().strip()  # blocks until the head is up or dead
    if not line:
        head.wait(timeout=30)
        tail = (root / "head.err").read_text()[-600:]
        pytest.fail(f"the Ray head did not start: {tail}")
    try:
        yield Head(line, token)
    finally:
        os.killpg(head.pid, 15)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, 9)


def _env(tmp_path: Path, head: Head, secret: str | None) -> dict[str, str]:
    """A CLI environment whose configuration names the cluster (and the secret with its token)."""
    config = tmp_path / "config.toml"
    text = f'[targets.cluster]\nkind = "ray"\naddress = "{head.address}"\nnum_cpus = 1\n'
    if secret:
        text += f'auth_token_secret = "{secret}"\n'
    config.write_text(text)
    env = {**os.environ, "PYTHONPATH": SRC, "EVALSWEEP_CONFIG": str(config),
           "HOME": str(tmp_path), "COLUMNS": "200"}  # fmt: skip
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_ADDRESS"):
        env.pop(name, None)
    return env


def _evalsweep(
    args: list[str], env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalsweep", *args], input=stdin, capture_output=True,
        text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


def _samples(tmp_path: Path) -> Path:
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines()]
    lines = []
    for problem in rows:
        lines.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        lines.append({"task_id": problem["task_id"], "completion": "    return 0\n"})
        # Passes only where the sample sees none of Ray's variables (the token least of all):
        # the Ray workers have them, the sandbox must not pass them on.
        lines.append({"task_id": problem["task_id"], "completion": SEES_NO_RAY_VARIABLE
                      + problem["canonical_solution"]})  # fmt: skip
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.slow
def test_a_cluster_with_token_authentication_refuses_a_command_without_the_token(
    ray_head: Head, tmp_path: Path
) -> None:
    samples = _samples(tmp_path)
    done = _evalsweep(
        ["code-eval", "--problems", str(PROBLEMS), "--samples", str(samples),
         "--target", "cluster", "--store", str(tmp_path / "s.sqlite")],
        _env(tmp_path, ray_head, None),
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert "ray target cluster: cannot connect" in lines[-1]  # Ray may log warnings above
    assert "token authentication" in lines[-1] and "auth_token_secret" in lines[-1]
    assert not list(tmp_path.glob("samples.jsonl_results.jsonl*"))


@pytest.mark.slow
def test_a_cluster_refuses_a_wrong_token_in_one_line_for_code_eval_and_run(
    ray_head: Head, tmp_path: Path, gpt2_a: Path, data_dir: Path
) -> None:
    env = _env(tmp_path, ray_head, "RAY_TOKEN")
    wrong = secrets.token_hex(16)
    stored = _evalsweep(["secrets", "set", "RAY_TOKEN"], env, stdin=wrong + "\n")
    assert stored.returncode == 0, stored.stderr
    samples = _samples(tmp_path)
    judged = _evalsweep(
        ["code-eval", "--problems", str(PROBLEMS), "--samples", str(samples),
         "--target", "cluster", "--store", str(tmp_path / "s.sqlite")], env,
    )  # fmt: skip
    ran = _evalsweep(
        ["run", str(gpt2_a), "--tasks", "mmlu_abstract_algebra", "--limit", "2",
         "--data-dir", str(data_dir), "--target", "cluster", "--device", "cpu",
         "--store", str(tmp_path / "s.sqlite")],
        {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )  # fmt: skip
    for done in (judged, ran):
        assert done.returncode != 0
        assert "Traceback" not in done.stderr
        assert (
            done.stderr.strip()
            .splitlines()[-1]
            .endswith(
                f": ray target cluster: the Ray cluster at {ray_head.address} refused the "
                "token from evalsweep secret RAY_TOKEN (compare it with `ray get-auth-token` on "
                "the head)"
            )
        )
        assert wrong not in done.stdout + done.stderr
    assert not list(tmp_path.glob("samples.jsonl_results.jsonl*"))


@pytest.mark.slow
def test_code_eval_and_run_on_the_cluster_with_the_token_as_an_evalsweep_secret(
    ray_head: Head, tmp_path: Path, gpt2_a: Path, data_dir: Path
) -> None:
    env = _env(tmp_path, ray_head, "RAY_TOKEN")
    stored = _evalsweep(["secrets", "set", "RAY_TOKEN"], env, stdin=ray_head.token + "\n")
    assert stored.returncode == 0, stored.stderr
    samples = _samples(tmp_path)
    local = _evalsweep(
        ["code-eval", "--problems", str(PROBLEMS), "--samples", str(samples), "--k", "1,2",
         "--results", str(tmp_path / "local.jsonl"), "--workers", "2"], env,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    remote = _evalsweep(
        ["code-eval", "--problems", str(PROBLEMS), "--samples", str(samples), "--k", "1,2",
         "--target", "cluster", "--slice-samples", "5", "--workers", "2", "--json",
         "--store", str(tmp_path / "s.sqlite"), "--results", str(tmp_path / "ray.jsonl")], env,
    )  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    judged = [json.loads(line) for line in (tmp_path / "ray.jsonl").read_text().splitlines()]
    isolated = [row for row in judged if row["completion"].startswith(SEES_NO_RAY_VARIABLE)]
    assert len(isolated) == 8 and all(row["passed"] for row in isolated), isolated
    document = json.loads(remote.stdout)
    assert document["execution"]["path"] == "distributed"
    assert document["execution"]["slices"] == 5 and document["execution"]["slices_retried"] == 0
    assert document["execution"]["slices_at_once"] == 2  # the head's 2 CPUs, 1 CPU a slice
    assert document["execution"]["setup"][0]["auth"] == "evalsweep secret RAY_TOKEN"
    import ray

    assert document["execution"]["setup"][0]["ray"] == ray.__version__
    ran = _evalsweep(
        ["run", str(gpt2_a), "--tasks", "mmlu_abstract_algebra", "--limit", "2",
         "--data-dir", str(data_dir), "--target", "cluster", "--device", "cpu",
         "--store", str(tmp_path / "s.sqlite"), "--json"],
        {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["compute"]["setup"]["auth"] == "evalsweep secret RAY_TOKEN"
    # The token's value is nowhere the commands wrote: output, results and their record,
    # the audit log, anything else in the folder (the secret store, encrypted, and HOME too).
    written = [remote.stdout, remote.stderr, ran.stdout, ran.stderr,
               (tmp_path / "ray.jsonl.run.json").read_text()]  # fmt: skip
    written += [path.read_bytes().decode("latin-1") for path in tmp_path.rglob("*")
                if path.is_file()]  # fmt: skip
    assert not any(ray_head.token in text for text in written)

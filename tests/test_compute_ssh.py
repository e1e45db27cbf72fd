"""The ssh target against a real sshd (Debian's openssh-server) on a loopback port.

The test starts ``sshd`` with a throwaway host key and a throwaway client key
in a temporary folder; the "remote" is this machine, reached over ssh, using
this interpreter and this checkout of evalsweep. A real small sweep runs there
and its rows land in the local store, identical to a local run's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalsweep.compute import SSHTarget, SweepJob
from evalsweep.engine import SilentProgress, SweepSpec
from evalsweep.errors import TargetError
from evalsweep.store import Store

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
TASKS = "mmlu_abstract_algebra,gsm8k"
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True
    )  # fmt: skip
    return path


@dataclass
class Sshd:
    port: int
    key: Path
    other_key: Path
    known_hosts: Path
    user: str
    home: Path


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real sshd on 127.0.0.1 that accepts one throwaway key, stopped after the tests."""
    if not Path(SSHD).is_file():
        pytest.fail("sshd not found: install openssh-server (.ci/deps-compute.sh)")
    root = tmp_path_factory.mktemp("sshd")
    host_key = _keygen(root / "host_key")
    key = _keygen(root / "client_key")
    other_key = _keygen(root / "refused_key")
    authorized = root / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    authorized.chmod(0o600)
    port = _free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {authorized}\nPidFile {root / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
        "MaxStartups 50\nMaxSessions 50\n"  # code-eval keeps several slices' connections open
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    server = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"sshd exited: {server.stderr.read().decode() if server.stderr else ''}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        server.kill()
        pytest.fail("sshd did not start listening")
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    try:
        yield Sshd(port, key, other_key, root / "known_hosts", user, root)
    finally:
        server.terminate()
        server.wait(timeout=10)


def _target(
    sshd: Sshd, workdir: Path, key: Path | None = None, port: int | None = None
) -> SSHTarget:
    return SSHTarget(
        name="box",
        host=f"{sshd.user}@127.0.0.1",
        port=port or sshd.port,
        identity_file=str(key or sshd.key),
        known_hosts=str(sshd.known_hosts),
        python=sys.executable,
        workdir=str(workdir),
        env={"PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
             "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        hourly_rate=2.5,
        hardware="loopback",
    )  # fmt: skip


def _config(path: Path, sshd: Sshd, workdir: Path) -> Path:
    target = _target(sshd, workdir)
    env = ", ".join(f'{k} = "{v}"' for k, v in target.env.items())
    path.write_text(
        "[targets.box]\n"
        'kind = "ssh"\n'
        f'host = "{target.host}"\nport = {target.port}\n'
        f'identity_file = "{target.identity_file}"\nknown_hosts = "{target.known_hosts}"\n'
        f'python = "{target.python}"\nworkdir = "{workdir}"\n'
        f'hourly_rate = {target.hourly_rate}\nhardware = "loopback"\n'
        f"env = {{ {env} }}\n"
    )
    return path


def _evalsweep(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalsweep", *args],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


def _rows(path: Path) -> dict[tuple[str, str, str], tuple[object, ...]]:
    with Store(path) as store:
        return {
            (r.checkpoint, r.task, r.doc_key): (
                r.backend,
                r.settings,
                r.request_hash,
                r.prediction,
                r.correct,
                r.metrics,
                r.responses,
            )  # fmt: skip
            for r in store.records()
        }


@pytest.mark.slow
def test_sweep_over_ssh_lands_in_local_store_identical_to_local_run(
    sshd: Sshd, tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    sweep = [str(gpt2_a), str(gpt2_b), "--tasks", TASKS, "--data-dir", str(data_dir)]
    sweep += ["--limit", "2", "--json"]
    local = _evalsweep(["run", *sweep, "--store", str(tmp_path / "local.sqlite")], cli_env)
    assert local.returncode == 0, local.stderr

    workdir = tmp_path / "remote"
    env = {**cli_env, "EVALSWEEP_CONFIG": str(_config(tmp_path / "config.toml", sshd, workdir))}
    pulled = tmp_path / "pulled.sqlite"
    remote = _evalsweep(["run", *sweep, "--target", "box", "--store", str(pulled)], env)
    assert remote.returncode == 0, remote.stderr

    # Same rows, question by question: keys, request hashes, answers and scores.
    local_rows, pulled_rows = _rows(tmp_path / "local.sqlite"), _rows(pulled)
    assert pulled_rows == local_rows and len(local_rows) > 0
    # Same headline numbers and verdicts.
    local_doc, remote_doc = json.loads(local.stdout), json.loads(remote.stdout)
    assert remote_doc["results"] == local_doc["results"]
    assert remote_doc["comparisons"] == local_doc["comparisons"]
    # The remote run is recorded with where it ran, what it found there and what it cost.
    compute = remote_doc["compute"]
    assert compute["kind"] == "ssh" and compute["hourly_rate"] == 2.5
    assert compute["setup"]["python"] == sys.executable
    assert compute["setup"]["evalsweep_path"].startswith(SRC)
    assert isinstance(compute["setup"]["gpus"], list)  # what nvidia-smi lists there, if any
    assert compute["spend"]["spend"] == pytest.approx(
        2.5 * compute["spend"]["billed_seconds"] / 3600, abs=1e-6
    )
    assert local_doc["compute"]["kind"] == "local" and local_doc["compute"]["spend"]["spend"] == 0
    with Store(pulled) as store:
        saved = json.loads(store.load_run(remote_doc["run_id"]))
        commands = store.audit_entries(target="box")
    assert saved["compute"]["setup"] == compute["setup"]
    # Every ssh command is in the audit log with its exact text, exit code and output size.
    assert commands and all(e["text"].startswith("ssh -p") for e in commands)
    assert all(e["exit_code"] == 0 and e["ended"] >= e["started"] for e in commands)
    sweep_entry = next(e for e in commands if " run " in e["text"])
    assert "--progress-lines" in sweep_entry["text"] and sweep_entry["output_bytes"] > 0
    assert any("cat " in e["text"] and "piece-00000.jsonl" in e["text"] for e in commands)
    # Local commands work on the pulled rows without the model.
    flips = _evalsweep(
        ["flips", str(gpt2_b), "--baseline", str(gpt2_a), "--tasks", TASKS,
         "--store", str(pulled), "--json"],
        cli_env,
    )  # fmt: skip
    assert flips.returncode == 0, flips.stderr
    local_flips = _evalsweep(
        ["flips", str(gpt2_b), "--baseline", str(gpt2_a), "--tasks", TASKS,
         "--store", str(tmp_path / "local.sqlite"), "--json"],
        cli_env,
    )  # fmt: skip
    assert json.loads(flips.stdout) == json.loads(local_flips.stdout)


def _job(gpt2_a: Path, data_dir: Path) -> SweepJob:
    spec = SweepSpec([str(gpt2_a)], ["mmlu_abstract_algebra"], str(data_dir), limit=1)
    return SweepJob(spec)


def test_refused_key_is_one_clear_error(
    sshd: Sshd, tmp_path: Path, gpt2_a: Path, data_dir: Path, store_path: Path
) -> None:
    target = _target(sshd, tmp_path / "remote", key=sshd.other_key)
    with Store(store_path) as store, pytest.raises(TargetError) as raised:
        target.run(_job(gpt2_a, data_dir), store, SilentProgress())
    message = str(raised.value)
    assert "refused" in message and str(sshd.other_key) in message and "\n" not in message
    with Store(store_path) as store:
        (entry,) = store.audit_entries(target="box")
    assert entry["exit_code"] == 255 and str(sshd.other_key) in entry["text"]


def test_unreachable_host_is_one_clear_error(
    sshd: Sshd, tmp_path: Path, gpt2_a: Path, data_dir: Path, store_path: Path
) -> None:
    target = _target(sshd, tmp_path / "remote", port=_free_port())
    with Store(store_path) as store, pytest.raises(TargetError, match="cannot reach") as raised:
        target.run(_job(gpt2_a, data_dir), store, SilentProgress())
    assert "\n" not in str(raised.value)


def test_cli_names_an_unknown_target(tmp_path: Path, cli_env: dict[str, str]) -> None:
    env = {**cli_env, "EVALSWEEP_CONFIG": str(tmp_path / "none.toml")}
    ran = _evalsweep(
        ["run", "./x", "--tasks", "gsm8k", "--target", "gpu9", "--store", str(tmp_path / "s")],
        env,
    )
    assert ran.returncode == 2
    assert "no target 'gpu9'" in ran.stderr and "Traceback" not in ran.stderr


def _remote_sweep_pid(store: Path) -> int | None:
    """The pid of the ``evalsweep run`` that sshd started for this test's remote store."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"evalsweep" in argv and b"run" in argv and str(store).encode() in argv:
            return int(entry.name)
    return None


@pytest.mark.slow
def test_sweep_killed_on_the_host_keeps_finished_rows_and_resumes(
    sshd: Sshd, tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    workdir = tmp_path / "remote"
    env = {**cli_env, "EVALSWEEP_CONFIG": str(_config(tmp_path / "config.toml", sshd, workdir))}
    pulled, remote_store = tmp_path / "pulled.sqlite", workdir / "results.sqlite"
    command = [sys.executable, "-m", "evalsweep", "run", str(gpt2_a), str(gpt2_b), "--tasks",
               TASKS, "--data-dir", str(data_dir), "--limit", "2", "--target", "box",
               "--store", str(pulled)]  # fmt: skip
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Kill the remote sweep as soon as its first chunk of rows is committed on the host.
    deadline = time.monotonic() + 300
    killed = False
    while time.monotonic() < deadline and sweep.poll() is None and not killed:
        if remote_store.is_file():
            with Store(remote_store) as store:
                started = next(iter(store.records()), None) is not None
            pid = _remote_sweep_pid(remote_store) if started else None
            if pid is not None:
                os.kill(pid, 9)
                killed = True
        time.sleep(0.05)
    _, stderr = sweep.communicate(timeout=300)
    assert killed, "the remote sweep finished before it could be killed"
    assert sweep.returncode == 2
    message = [line for line in stderr.decode().splitlines() if "error:" in line]
    assert len(message) == 1 and "killed" in message[0] and "resume" in message[0]
    with Store(pulled) as store:
        kept = len(list(store.records()))
    assert 0 < kept < 8  # 2 checkpoints x (2 MMLU + 2 GSM8K questions)
    # The same command finishes the sweep; the host computes only what was missing.
    again = subprocess.run(command + ["--json"], env=env, capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr.decode()
    with Store(pulled) as store:
        assert len(list(store.records())) == 8
    assert json.loads(again.stdout)["compute"]["kind"] == "ssh"

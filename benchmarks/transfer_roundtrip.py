"""Results moved between machines lose nothing: full test sets through export/import and ssh.

Two tiny GPT-2 checkpoints (random weights, different seeds) are scored 0-shot
on the full test sets into one store (the original). Its rows then travel two
ways and land in fresh stores:

1. ``evalsweep export-results A B --tasks ... --out pieces/`` then
   ``evalsweep import-results pieces/``;
2. the ssh target (``SSHTarget``, in this process): a real ``sshd`` on 127.0.0.1
   with throwaway keys, the host's store a copy of the original, so the remote
   ``evalsweep run`` finds every row and computes nothing; its rows come back in
   pieces over ssh. With ``--no-score`` (rows of a scoring cut short, which a
   remote run would go on computing) only the target's pull runs: export-results
   on the host, ``ssh cat`` of each piece, the checked import here.

Each copy's rows must equal the original's, column by column (all of
``samples`` but ``created``, the time a row was written, and the ``keys`` the
rows point to). The script prints store size, piece count and bytes, and the
time of each step; ``--write`` appends them to ``benchmarks/RESULTS.md``.

Usage::

    python benchmarks/transfer_roundtrip.py --data-dir ../shared/data \\
        [--tasks mmlu,gsm8k,arc_easy,arc_challenge,hellaswag,humaneval,mbpp] \\
        [--work DIR] [--limit N] [--no-score] [--write]

``--work`` keeps the checkpoints and the scored store between runs (rows are not
scored twice); ``--limit`` caps documents per task (per MMLU subject) for tasks
other than MMLU, which always runs in full.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from evalsweep.compute import CommandRunner, SSHTarget, SweepJob  # noqa: E402
from evalsweep.engine import SilentProgress, SweepSpec  # noqa: E402
from evalsweep.models import BackendOptions  # noqa: E402
from evalsweep.store import Store  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SRC = str(ROOT / "src")
ALL_TASKS = "mmlu,gsm8k,arc_easy,arc_challenge,hellaswag,humaneval,mbpp"
COLUMNS = (
    "checkpoint, backend, task, settings, doc_key, doc_id, subject, request_hash, requests, "
    "responses, target, prediction, correct, response, metrics, details, document"
)
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def _env() -> dict[str, str]:
    env = {**os.environ, **OFFLINE, "PYTHONPATH": SRC}
    env.pop("EVALSWEEP_STORE", None)
    return env


def _evalsweep(args: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run the CLI; return (seconds, stdout); stop the benchmark on failure."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "evalsweep", *args],
        capture_output=True, text=True, env=env or _env(), check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"evalsweep {' '.join(args[:2])} failed ({done.returncode}):\n{done.stderr}")
    return seconds, done.stdout


def _checkpoints(folder: Path, data_dir: Path) -> list[str]:
    """The tests' tiny GPT-2 shape (2 layers, width 32), seeds 0 and 1."""
    from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir

    paths = [folder / f"ckpt-{seed}" for seed in (0, 1)]
    if all((p / "config.json").is_file() for p in paths):
        return [str(p) for p in paths]
    tokenizer = build_tokenizer(corpus_from_data_dir(data_dir, max_lines=3000), vocab_size=1024)
    for seed, path in enumerate(paths):
        build_checkpoint(
            path, tokenizer, n_layer=2, width=32, n_head=2, max_positions=2048,
            architecture="gpt2", seed=seed,
        )  # fmt: skip
    return [str(p) for p in paths]


def _rows(path: Path, tasks: list[str]) -> list[tuple[object, ...]]:
    """The rows of ``tasks`` (a kept --work store may hold other tasks' rows too)."""
    marks = ", ".join("?" * len(tasks))
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            f"SELECT {COLUMNS} FROM samples WHERE task IN ({marks}) ORDER BY 1, 2, 3, 4, 5", tasks
        ).fetchall()


def _keys(path: Path) -> dict[str, tuple[str, str]]:
    with closing(sqlite3.connect(path)) as conn:
        return {k: (kind, v) for k, kind, v in conn.execute("SELECT key, kind, value FROM keys")}


def _same(original: Path, copy: Path, tasks: list[str]) -> tuple[bool, int]:
    """Whether ``copy`` holds exactly the original's rows, and the keys they point to."""
    rows, copied = _rows(original, tasks), _rows(copy, tasks)
    keys, copied_keys = _keys(original), _keys(copy)
    used = {r[1] for r in rows} | {r[3] for r in rows}
    keys_ok = all(copied_keys.get(k) == keys[k] for k in used if k in keys)
    return rows == copied and keys_ok, len(copied)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _sshd(folder: Path) -> Iterator[tuple[int, Path, Path]]:
    """A throwaway sshd on 127.0.0.1: (port, client key, known_hosts)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    for name in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True
        )
    authorized = folder / "authorized_keys"
    authorized.write_text((folder / "client_key.pub").read_text())
    authorized.chmod(0o600)
    port = _free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {authorized}\nPidFile {folder / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            sys.exit("sshd did not start listening")
        yield port, folder / "client_key", folder / "known_hosts"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--tasks", default=ALL_TASKS, help=f"default: {ALL_TASKS}")
    parser.add_argument("--work", type=Path, help="keep checkpoints and the scored store here")
    parser.add_argument("--limit", type=int, help="documents per task for tasks other than mmlu")
    parser.add_argument("--write", action="store_true", help="append the figures to RESULTS.md")
    parser.add_argument(
        "--no-score",
        action="store_true",
        help="move the rows --work's store holds as they are (a scoring cut short)",
    )
    args = parser.parse_args()
    os.environ.update(OFFLINE)

    keep = args.work is not None
    work = args.work or Path(tempfile.mkdtemp(prefix="evalsweep-transfer-"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir.resolve()
    checkpoints = _checkpoints(work / "checkpoints", data_dir)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    original = work / "original.sqlite"
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"checkpoints: 2 GPT-2 (2 layers, width 32); tasks: {', '.join(tasks)}; 0-shot")
    scored = 0.0
    for task in [] if args.no_score else tasks:
        run = [*checkpoints, "--tasks", task, "--num-fewshot", "0", "--data-dir", str(data_dir)]
        run += ["--store", str(original), "--device", "cpu"]
        if args.limit is not None and task != "mmlu":
            run += ["--limit", str(args.limit)]
        seconds, _ = _evalsweep(["run", *run])
        scored += seconds
        with closing(sqlite3.connect(original)) as conn:
            count = conn.execute("SELECT COUNT(*) FROM samples WHERE task = ?", (task,))
            say(f"- scored {task}: {count.fetchone()[0]} rows in {seconds:.1f} s")
    total = len(_rows(original, tasks))
    if args.no_score:
        say(f"original store: {total} rows as stored, {_size(original)}")
    else:
        say(f"original store: {total} rows, {_size(original)}, scored in {scored:.1f} s")

    # 1. export-results, then import-results into a fresh store.
    pieces = work / "pieces"
    shutil.rmtree(pieces, ignore_errors=True)
    export = ["export-results", *checkpoints, "--tasks", ",".join(tasks)]
    export += ["--store", str(original), "--out", str(pieces), "--json"]
    export_s, out = _evalsweep(export)
    listed = json.loads(out)["pieces"]
    piece_bytes = sum(p["bytes"] for p in listed)
    imported = work / "imported.sqlite"
    imported.unlink(missing_ok=True)
    import_s, _ = _evalsweep(["import-results", str(pieces), "--store", str(imported)])
    same, count = _same(original, imported, tasks)
    say(
        f"export+import: {len(listed)} pieces, {piece_bytes / 1e6:.1f} MB "
        f"(largest {max(p['bytes'] for p in listed) / 1e6:.2f} MB); export {export_s:.1f} s, "
        f"import {import_s:.1f} s; {count} rows, equal to the original's: {same}"
    )

    # 2. The ssh target on loopback, the host's store a copy of the original.
    with tempfile.TemporaryDirectory(prefix="evalsweep-sshd-") as tmp:
        folder = Path(tmp)
        remote = folder / "remote"
        remote.mkdir()
        shutil.copyfile(original, remote / "results.sqlite")
        pulled = work / "pulled.sqlite"
        pulled.unlink(missing_ok=True)
        with _sshd(folder) as (port, key, known_hosts):
            target = SSHTarget(
                name="box", host=f"{pwd.getpwuid(os.geteuid()).pw_name}@127.0.0.1", port=port,
                identity_file=str(key), known_hosts=str(known_hosts), python=sys.executable,
                workdir=str(remote), env={**OFFLINE, "PYTHONPATH": SRC}, hardware="loopback",
            )  # fmt: skip
            if args.no_score:
                # The rows stored so far: only the ssh target's pull (what ends every sweep on
                # a host: export-results there, ssh cat of each piece, checked import here).
                job = SweepJob(SweepSpec(checkpoints, tasks, str(data_dir), num_fewshot=0))
                with Store(pulled) as store:
                    began = time.perf_counter()
                    target.pull(
                        job,
                        CommandRunner(store, "box"),
                        SilentProgress(),
                        str(remote / "results.sqlite"),
                    )
                    ssh_s = time.perf_counter() - began
                what = "pull: export on the host, ssh cat, checked import"
            else:
                # The whole sweep command, the host finding every row already stored.
                ssh_s = 0.0
                for task in tasks:
                    # The sweep that scored the original (its command line is to_argv of this).
                    limit = args.limit if task != "mmlu" else None
                    spec = SweepSpec(
                        checkpoints, [task], str(data_dir), limit=limit, num_fewshot=0,
                        options=BackendOptions(device="cpu"),
                    )  # fmt: skip
                    job = SweepJob(spec)
                    began = time.perf_counter()
                    with Store(pulled) as store:
                        target.run(job, store, SilentProgress())
                    seconds = time.perf_counter() - began
                    ssh_s += seconds
                    say(f"- ssh {task}: {seconds:.1f} s")
                what = "sweep commands: remote run with every row stored, export, pull, import"
            with closing(sqlite3.connect(pulled)) as conn:
                ssh_pieces = conn.execute(
                    "SELECT COUNT(*), SUM(output_bytes) FROM audit WHERE kind = 'transfer' "
                    "AND text LIKE '%piece-%'"
                ).fetchone()
    same_ssh, count_ssh = _same(original, pulled, tasks)
    say(
        f"ssh target (loopback): {ssh_pieces[0]} pieces, {(ssh_pieces[1] or 0) / 1e6:.1f} MB, "
        f"{ssh_s:.1f} s ({what}); {count_ssh} rows, equal to the original's: {same_ssh}"
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    say(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load}")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    if args.write:
        with RESULTS.open("a") as handle:
            handle.write(
                f"\n## Results moved between machines ({datetime.now(UTC).date()})\n\n"
                f"`python benchmarks/transfer_roundtrip.py --data-dir DATA --tasks "
                f"{','.join(tasks)}"
                + (f" --limit {args.limit}" if args.limit else "")
                + (" --no-score" if args.no_score else "")
                + "`\n\n"
                + "\n".join(f"- {line.removeprefix('- ')}" for line in lines)
                + "\n"
            )
    if not (same and same_ssh):
        sys.exit("rows differ after the trip")


if __name__ == "__main__":
    main()

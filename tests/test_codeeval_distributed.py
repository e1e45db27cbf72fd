"""``code-eval --target``: slices judged on a real ssh host (a real sshd on loopback).

The "remote" is this machine reached over ssh, with this interpreter and this
checkout; each slice runs ``evalsweep code-eval-slice`` there in evalsweep's
own sandbox. Results must be byte-identical to a local run's; a worker killed
mid-slice costs a retry of what it had not sent back; a sample that kills its
own worker every time is judged ``error`` alone, never its slice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evalsweep.codeeval import code_eval
from evalsweep.codeeval._slices import cut_slices, decode_slice, encode_slice
from evalsweep.codeeval._usage import RunCost, Tariff, tariff_from_config
from evalsweep.compute import SSHTarget
from evalsweep.execution import ExecutionRequest, FunctionTest
from evalsweep.store import Store
from test_compute_ssh import Sshd, _free_port, sshd  # noqa: F401 - the loopback sshd fixture

SRC = str(Path(__file__).resolve().parents[1] / "src")
PROBLEMS = Path(__file__).parent / "data" / "code_eval_distributed" / "HumanEval-first8.jsonl"


def _config(host: Sshd, tmp_path: Path, tariff: str = "") -> dict[str, object]:
    """The person's configuration (as load_config returns it) with the loopback host."""
    import tomllib

    text = (
        "[targets.box]\nkind = \"ssh\"\n"
        f'host = "{host.user}@127.0.0.1"\nport = {host.port}\n'
        f'identity_file = "{host.key}"\nknown_hosts = "{host.known_hosts}"\n'
        f'python = "{sys.executable}"\nworkdir = "{tmp_path / "remote"}"\n'
        f'env = {{ PYTHONPATH = "{SRC}" }}\n'
        + tariff
    )  # fmt: skip
    (tmp_path / "config.toml").write_text(text)
    return tomllib.loads(text)


def _samples(tmp_path: Path, extra: list[dict[str, str]] | None = None) -> Path:
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines()]
    lines = []
    for problem in rows:
        lines.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        lines.append({"task_id": problem["task_id"], "completion": "    return None\n"})
    # Slow: each of the test's seven calls sleeps, so it times out (3 s) in any run.
    slow = "    import time\n    time.sleep(0.6)\n" + rows[0]["canonical_solution"]
    lines += [{"task_id": rows[0]["task_id"], "completion": slow} for _ in range(2)]
    # Lone surrogates cross both ways: one in a completion (which one process cannot compile),
    # and one in what a program raises (the verdict's detail).
    lines.append({"task_id": rows[0]["task_id"], "completion": "    return 1  # \udcff\n"})
    raising = "    raise ValueError(chr(0xD800) + 'x')\n"
    lines.append({"task_id": rows[0]["task_id"], "completion": raising, "note": "\ud800"})
    lines += extra or []
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def local_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """The plain local run of the samples: what every distributed run must reproduce."""
    folder = tmp_path_factory.mktemp("local")
    samples = _samples(folder)
    ran = code_eval(PROBLEMS, samples, targets=["local"], ks=(1, 2), workers=2, config={})
    return samples, Path(ran.result.results_path), ran


def _run_box(host: Sshd, tmp_path: Path, samples: Path, **options: object) -> tuple[object, Store]:
    config = _config(host, tmp_path, str(options.pop("tariff", "")))
    store = Store(tmp_path / "store.sqlite")
    ran = code_eval(
        PROBLEMS, samples, targets=["box"], ks=(1, 2), config=config, store=store,
        results_path=tmp_path / "results.jsonl", **options,  # type: ignore[arg-type]
    )  # fmt: skip
    return ran, store


def test_slices_on_an_ssh_host_give_the_local_run_byte_for_byte(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    local_results: tuple[Path, Path, object],
) -> None:
    samples, local_path, local = local_results
    tariff = (
        '[tariff]\nname = "test"\nvcpu_second = 0.00001\ngb_second = 0.000002\n'
        "minimum_seconds = 60\n"
    )
    ran, store = _run_box(
        sshd, tmp_path, samples, slice_samples=5, slices_per_host=2, workers=1, tariff=tariff
    )
    with store:
        audited = [e["text"] for e in store.audit_entries(target="box")]
    assert (tmp_path / "results.jsonl").read_bytes() == local_path.read_bytes()
    rows = [json.loads(line) for line in local_path.read_text().splitlines()]
    # As one process: the completion does not compile, the raised text is kept as raised.
    assert "surrogates not allowed" in rows[-2]["result"] and rows[-2]["verdict"] == "error"
    assert rows[-1]["result"] == "failed: \ud800x" and rows[-1]["note"] == "\ud800"
    assert ran.result.pass_at_k == local.result.pass_at_k  # type: ignore[attr-defined]
    assert ran.result.counts == local.result.counts  # type: ignore[attr-defined]
    record = ran.record
    assert record["path"] == "distributed" and record["targets"] == ["box"]
    assert record["slices"] == 4 and record["slices_retried"] == 0  # 20 samples, 5 a slice
    assert record["slices_at_once"] == 2 and record["tail_slice_samples"] == 5
    assert sum("code-eval-slice" in text for text in audited) == 5  # 4 slices and the probe
    worker = record["workers"][0]
    assert worker["versions"]["python"] and worker["versions"]["evalsweep"]
    assert "seccomp" in worker["sandbox"]["active"] and record["sandbox_differs_on"] == []
    usage = ran.as_dict()["usage"]
    assert usage["samples"] == 20 and usage["billing_units"] == 4
    assert usage["cpu_seconds"] > 0 and usage["peak_memory_mb"] > 0
    # Each slice's worker is billed at least the 60-second minimum.
    assert usage["cost"] >= 4 * 60 * 0.00001
    assert usage["tariff"]["name"] == "test" and usage["per_1000_samples"]["cost"] > 0
    # The record travels with the results: tariff, workers' versions and sandbox layers.
    kept = json.loads((tmp_path / "results.jsonl.run.json").read_text())
    assert kept["usage"] == usage and kept["execution"]["workers"] == record["workers"]
    assert kept["execution"]["tariff"]["vcpu_second"] == 0.00001


def _slice_workers() -> list[int]:
    """Processes running ``python -m evalsweep code-eval-slice`` (not the ssh clients)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"code-eval-slice" in argv and b"ssh" not in Path(argv[0].decode()).name.encode():
                found.append(int(entry.name))
    return found


def test_a_worker_killed_mid_slice_costs_a_retry_not_a_verdict(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    local_results: tuple[Path, Path, object],
) -> None:
    samples, local_path, _ = local_results
    killed: list[int] = []

    def kill_after_two(done: int, total: int) -> None:
        if done == 2 and not killed:  # two verdicts of the first slice are back
            (worker,) = _slice_workers()  # one slice in flight at a time
            os.kill(worker, signal.SIGKILL)
            killed.append(worker)

    ran, store = _run_box(
        sshd, tmp_path, samples, slice_samples=11, slices_per_host=1, workers=1,
        progress=kill_after_two,
    )  # fmt: skip
    store.close()
    assert killed
    assert (tmp_path / "results.jsonl").read_bytes() == local_path.read_bytes()
    rows = [json.loads(line) for line in local_path.read_text().splitlines()]
    # As one process: the completion does not compile, the raised text is kept as raised.
    assert "surrogates not allowed" in rows[-2]["result"] and rows[-2]["verdict"] == "error"
    assert rows[-1]["result"] == "failed: \ud800x" and rows[-1]["note"] == "\ud800"
    record = ran.record
    assert record["slices"] == 2 and record["slices_retried"] == 1
    assert record["retried_because"] == {"ssh session ended (remote worker killed)": 1}
    assert record["samples_judged_alone_as_error"] == 0
    assert ran.result.run.samples_run == 20


# A sample that finds the slice worker judging it (its own ancestor) and kills it.
KILLER = (
    "    import os, signal\n"
    "    pid = os.getppid()\n"
    "    while pid > 1:\n"
    "        with open(f'/proc/{pid}/cmdline', 'rb') as handle:\n"
    "            if b'code-eval-slice' in handle.read():\n"
    "                os.kill(pid, signal.SIGKILL)\n"
    "        with open(f'/proc/{pid}/stat') as handle:\n"
    "            pid = int(handle.read().rpartition(')')[2].split()[1])\n"
    "    return None\n"
)


def test_a_sample_that_keeps_killing_its_worker_is_judged_error_alone(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Unsafe mode lets a sample reach its worker; the sandboxed default never would."""
    killer = {"task_id": "HumanEval/3", "completion": KILLER}
    samples = _samples(tmp_path, [killer])
    code_eval(
        PROBLEMS, samples, targets=["local"], ks=(1,), workers=2, config={},
        unsafe_no_sandbox=True, results_path=tmp_path / "local.jsonl",
    )  # fmt: skip
    ran, store = _run_box(
        sshd, tmp_path, samples, slice_samples=8, slices_per_host=2, workers=1,
        retries=1, unsafe_no_sandbox=True,
    )  # fmt: skip
    store.close()
    local_rows = (tmp_path / "local.jsonl").read_text().splitlines()
    remote_rows = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(local_rows) == len(remote_rows) == 21
    assert remote_rows[:-1] == local_rows[:-1]  # every other sample: the local verdict
    last = json.loads(remote_rows[-1])
    assert last["verdict"] == "error" and last["reason"] == "worker killed"
    record = ran.record
    assert record["samples_judged_alone_as_error"] == 1
    assert record["slices_retried"] >= 3  # its slice, a half of it, then the sample alone


def test_an_interrupted_distributed_run_resumes_from_its_verdicts(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    local_results: tuple[Path, Path, object],
) -> None:
    samples, local_path, _ = local_results
    seen: list[int] = []

    def stop_after_six(done: int, total: int) -> None:
        seen.append(done)
        if done == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run_box(sshd, tmp_path, samples, slice_samples=6, workers=1, progress=stop_after_six)
    partial = tmp_path / "results.jsonl.partial"
    assert len(partial.read_text().splitlines()) == 1 + 6  # header and six verdicts
    ran, store = _run_box(sshd, tmp_path, samples, slice_samples=6, workers=1)
    store.close()
    assert ran.result.run.samples_resumed == 6 and ran.result.run.samples_run == 14
    assert (tmp_path / "results.jsonl").read_bytes() == local_path.read_bytes()
    rows = [json.loads(line) for line in local_path.read_text().splitlines()]
    # As one process: the completion does not compile, the raised text is kept as raised.
    assert "surrogates not allowed" in rows[-2]["result"] and rows[-2]["verdict"] == "error"
    assert rows[-1]["result"] == "failed: \ud800x" and rows[-1]["note"] == "\ud800"


def test_an_unreachable_host_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    samples = _samples(tmp_path)
    env = {**os.environ, "PYTHONPATH": SRC, "EVALSWEEP_CONFIG": str(tmp_path / "none.toml")}
    done = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(PROBLEMS),
         "--samples", str(samples), "--target", f"ssh://nobody@127.0.0.1:{_free_port()}",
         "--store", str(tmp_path / "s.sqlite")],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ssh target" in lines[0] and "cannot reach" in lines[0]
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("samples.jsonl_results.jsonl*"))


# -- slices and cost, without a host -----------------------------------------------------------


def _request(program: str, test: str = "def check(c): pass") -> ExecutionRequest:
    return ExecutionRequest(program, test=FunctionTest(test, "f"), key=program[:10])


def test_slices_hold_at_most_their_samples_and_bytes_and_carry_each_test_once() -> None:
    big_test = "def check(c):\n" + "    assert True\n" * 2000  # ~32 KB, shared by all
    items = [(i, _request(f"def f():\n    return {'x' * (100 * i)!r}\n", big_test))
             for i in range(300)]  # fmt: skip
    for max_samples, max_bytes in ((250, 5_000_000), (1000, 200_000), (7, 5_000_000)):
        slices = cut_slices(items, max_samples, max_bytes)
        assert [item for piece in slices for item in piece] == items  # order kept, none lost
        for piece in slices:
            message = encode_slice(piece, {})
            assert len(piece) <= max_samples and len(message) <= max_bytes
            assert message.count(b"assert True") == 2000  # the test travels once per slice
            options, decoded = decode_slice(message)
            assert decoded == piece
    with pytest.raises(ValueError, match="more than a 50000-byte slice"):
        cut_slices([(0, _request("x" * 60_000))], 10, 50_000)


def test_cost_bills_each_unit_at_least_the_minimum() -> None:
    from evalsweep.codeeval._usage import BillingUnit

    tariff = Tariff(vcpu_second=0.01, gb_second=0.1, minimum_seconds=60)
    units = [BillingUnit("a", 2, 10.2, 500.0, 15.0), BillingUnit("b", 1, 90.0, 1000.0, 80.0)]
    cost = RunCost(2000, 95.0, units, tariff)
    memory = 500 * 1024 * 1024 / 1e9, 1000 * 1024 * 1024 / 1e9
    expected = 60 * (2 * 0.01 + memory[0] * 0.1) + 90 * (1 * 0.01 + memory[1] * 0.1)
    assert cost.cost() == pytest.approx(expected)
    data = cost.as_dict()
    assert data["per_1000_samples"]["cost"] == pytest.approx(expected / 2, abs=1e-6)
    assert data["cpu_seconds"] == 95.0 and data["peak_memory_mb"] == 1000.0
    assert RunCost(2000, 95.0, units, None).as_dict()["cost"] is None


def test_a_target_tariff_overrides_the_default_and_bad_values_are_named() -> None:
    from evalsweep.errors import ConfigError

    config = {"tariff": {"vcpu_second": 1.0, "minimum_seconds": 60, "box": {"vcpu_second": 2.0}}}
    assert tariff_from_config(config, "box", "c.toml") == Tariff(2.0, 0.0, 60.0)
    assert tariff_from_config(config, "other", "c.toml") == Tariff(1.0, 0.0, 60.0)
    assert tariff_from_config({}, "box", "c.toml") is None
    with pytest.raises(ConfigError, match=r"c.toml \[tariff\]: tariff gb_second must be"):
        tariff_from_config({"tariff": {"gb_second": -1}}, "box", "c.toml")
    with pytest.raises(ConfigError, match="unknown tariff setting"):
        tariff_from_config({"tariff": {"per_hour": 1}}, "box", "c.toml")


def test_ssh_target_class_is_what_code_eval_uses() -> None:
    from evalsweep.codeeval._transports import SSHSlices, make_transport
    from evalsweep.compute._skypilot import SkyPilotTarget
    from evalsweep.errors import TargetError

    target = SSHTarget(name="box", host="me@example.org")
    assert isinstance(make_transport(target, None, 2), SSHSlices)  # type: ignore[arg-type]
    with pytest.raises(TargetError, match="cannot judge code samples"):
        make_transport(SkyPilotTarget(name="cloud"), None, 2)  # type: ignore[arg-type]


def test_secrets_reach_the_remote_run_by_name_and_nothing_records_their_value(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    gpt2_a: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from evalsweep.compute import SweepJob, run_on_target
    from evalsweep.engine import SilentProgress, SweepSpec
    from evalsweep.report import document_json
    from evalsweep.secrets import SecretBox

    monkeypatch.setenv("EVALSWEEP_CONFIG", str(tmp_path / "config.toml"))
    value = "hf_" + os.urandom(12).hex()
    SecretBox().set("HF_TOKEN", value)
    target = SSHTarget(
        name="box", host=f"{sshd.user}@127.0.0.1", port=sshd.port,
        identity_file=str(sshd.key), known_hosts=str(sshd.known_hosts), python=sys.executable,
        workdir=str(tmp_path / "remote"), secrets=["HF_TOKEN"],
        env={"PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )  # fmt: skip
    spec = SweepSpec([str(gpt2_a)], ["mmlu_abstract_algebra"], str(data_dir), limit=2)
    job = SweepJob(spec)
    with Store(tmp_path / "store.sqlite") as store:
        document, _ = run_on_target(target, job, store, SilentProgress())
        audit = json.dumps(store.audit_entries(target="box"))
    assert document.secrets_received == ["HF_TOKEN"]  # the remote run had it
    assert document.compute is not None and document.compute["secrets"] == ["HF_TOKEN"]
    assert value not in document_json(document) and value not in audit
    assert value not in (tmp_path / "store.sqlite").read_bytes().decode("latin-1")


def test_samples_never_see_the_workers_environment(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A variable set for the remote worker (as a secret would be) is not in any sample's."""
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines()]
    probe = "    import os\n    assert 'EVALSWEEP_PROBE' not in os.environ\n"
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        json.dumps(
            {"task_id": rows[0]["task_id"], "completion": probe + rows[0]["canonical_solution"]}
        )
        + "\n"
    )
    config = _config(sshd, tmp_path)
    config["targets"]["box"]["env"]["EVALSWEEP_PROBE"] = "visible"  # type: ignore[index]
    with Store(tmp_path / "store.sqlite") as store:
        ran = code_eval(
            PROBLEMS, samples, targets=["box"], ks=(1,), config=config, store=store, workers=1
        )
    assert ran.result.counts["passed"] == 1


def test_the_command_names_where_samples_were_judged_and_what_it_used(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    local_results: tuple[Path, Path, object],
) -> None:
    samples, local_path, _ = local_results
    _config(sshd, tmp_path, "[tariff]\nvcpu_second = 0.00002\nminimum_seconds = 60\n")
    env = {**os.environ, "PYTHONPATH": SRC, "EVALSWEEP_CONFIG": str(tmp_path / "config.toml"),
           "COLUMNS": "200"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(PROBLEMS),
         "--samples", str(samples), "--k", "1,2", "--target", "box", "--workers", "1",
         "--results", str(tmp_path / "out.jsonl"), "--store", str(tmp_path / "s.sqlite")],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.jsonl").read_bytes() == local_path.read_bytes()
    out = done.stdout
    assert "judged on box: 1 slices, 0 retried" in out
    assert "usage: " in out and "per 1,000 samples" in out and "cost " in out
    assert "2e-05/vCPU-s" in out and "minimum 60 s per unit" in out


# Fails with the order Python's set gives ten strings: an order the hash seed decides.
SET_ORDER = (
    "    raise KeyError(' '.join({'alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot',\n"
    "                             'golf', 'hotel', 'india', 'juliet'}))\n"
)


def test_a_hash_seed_dependent_sample_is_judged_alike_in_every_slice_and_locally(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """One hash seed for the whole run: every slice's sandboxes, and a local run given it."""
    task = json.loads(PROBLEMS.read_text().splitlines()[0])["task_id"]
    samples = tmp_path / "samples.jsonl"
    samples.write_text((json.dumps({"task_id": task, "completion": SET_ORDER}) + "\n") * 6)

    def local(seed: int, name: str) -> tuple[object, bytes]:
        ran = code_eval(PROBLEMS, samples, ks=(1,), workers=2, config={}, hash_seed=seed,
                        results_path=tmp_path / name)  # fmt: skip
        return ran, (tmp_path / name).read_bytes()

    first, seeded = local(12345, "local-a.jsonl")
    assert first.record["hash_seed"] == 12345  # type: ignore[attr-defined]
    assert local(12345, "local-b.jsonl")[1] == seeded  # the same seed: the same outcomes
    assert local(54321, "local-c.jsonl")[1] != seeded  # the outcome does depend on the seed
    (tmp_path / "remote").mkdir()
    ran, store = _run_box(sshd, tmp_path, samples, slice_samples=1, workers=1, hash_seed=12345)
    store.close()
    assert ran.record["slices"] == 6 and ran.record["hash_seed"] == 12345  # type: ignore[attr-defined]
    assert (tmp_path / "results.jsonl").read_bytes() == seeded
    # Without a seed: one random seed for all six slices, recorded, and a local run given it
    # judges the samples as the slices did.
    ran, store = _run_box(sshd, tmp_path, samples, slice_samples=1, workers=1, resume=False)
    store.close()
    results = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len({json.loads(line)["result"] for line in results}) == 1, results
    chosen = ran.record["hash_seed"]  # type: ignore[attr-defined]
    assert local(chosen, "local-d.jsonl")[1] == (tmp_path / "results.jsonl").read_bytes()


def test_the_command_takes_a_hash_seed_records_it_and_names_a_bad_one(tmp_path: Path) -> None:
    task = json.loads(PROBLEMS.read_text().splitlines()[0])["task_id"]
    samples = tmp_path / "samples.jsonl"
    samples.write_text((json.dumps({"task_id": task, "completion": SET_ORDER}) + "\n") * 2)
    env = {**os.environ, "PYTHONPATH": SRC, "EVALSWEEP_CONFIG": str(tmp_path / "none.toml")}

    def command(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(PROBLEMS),
             "--samples", str(samples), "--k", "1", *extra],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip

    done = command("--hash-seed", "4294967295", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["execution"]["hash_seed"] == 4294967295
    local = code_eval(PROBLEMS, samples, ks=(1,), config={}, hash_seed=4294967295,
                      results_path=tmp_path / "again.jsonl")  # fmt: skip
    assert (tmp_path / "again.jsonl").read_bytes() == Path(f"{samples}_results.jsonl").read_bytes()
    assert local.record["hash_seed"] == 4294967295
    for bad in ("4294967296", "-1"):
        refused = command("--hash-seed", bad, "--no-resume")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert f"Invalid value for '--hash-seed': {bad} is not between 0 and 4294967295" in (
            refused.stderr
        )


def test_slices_shrink_toward_the_end_of_a_run_and_keep_every_sample_in_order() -> None:
    from evalsweep.codeeval._slices import MIN_TAIL_SAMPLES

    for count, max_samples, spread in ((164, 250, 4), (8200, 250, 4), (1000, 250, 2), (60, 5, 3),
                                       (300, 250, 1), (7, 250, 8)):  # fmt: skip
        items = [(i, _request(f"def f():\n    return {i}\n")) for i in range(count)]
        slices = cut_slices(items, max_samples, spread=spread)
        assert [item for piece in slices for item in piece] == items
        sizes = [len(piece) for piece in slices]
        assert max(sizes) <= max_samples
        assert sizes == sorted(sizes, reverse=True)  # never a bigger slice after a smaller one
        left = count
        for size in sizes:  # each slice: ceil(left / spread), within [tail minimum, max_samples]
            floor = min(max_samples, MIN_TAIL_SAMPLES, left)
            assert size == max(floor, min(max_samples, -(-left // spread), left))
            left -= size
    # without a spread, every slice but the last is full (the plain cut)
    items = [(i, _request(f"def f():\n    return {i}\n")) for i in range(164)]
    assert [len(p) for p in cut_slices(items, 50)] == [50, 50, 50, 14]

"""Which isolation layers hold, how the service reports them, and how it degrades."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionService,
    FunctionTest,
    Limits,
    SandboxReport,
)
from evalsweep.execution._rootfs import RESIDENT_ROOT, interpreter_dirs, root_spec

EXPECTED_LAYERS = {
    "user namespace",
    "pid namespace",
    "network namespace",
    "mount namespace",
    "ipc namespace",
    "uts namespace",
    "read-only root",
    "resident split root",
    "mapped files locked",
    "unprivileged identity",
    "scratch tmpfs",
    "process-tree kill",
    "same pid every run",
    "seccomp",
    "cgroup memory",
    "cgroup pids",
    "resource limits",
    "clean environment",
    "output cap",
    "verdict outside the sample",
}

INSIDE = """
import json, os, socket
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
facts = {
    "uid_map": open("/proc/self/uid_map").read().split(),
    "uid": os.getuid(),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == [os.getpid()],
    "hostname": socket.gethostname(),
    "seccomp": status["Seccomp"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "cap_eff": status["CapEff"].strip(),
    "root": sorted(os.listdir("/")),
    "env": sorted(os.environ),
    "cwd": os.getcwd(),
    "mounts": [line.split()[1] for line in open("/proc/self/mounts")],
}
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def service() -> Iterator[ExecutionService]:
    with ExecutionService(workers=1) as running:
        yield running


def test_every_layer_is_active_on_a_root_linux_machine(service: ExecutionService) -> None:
    report = service.report
    assert os.geteuid() == 0, "the sandbox tests run as root, as in CI"
    missing = {layer.name: layer.detail for layer in report.layers if not layer.active}
    assert missing == {}
    assert {layer.name for layer in report.layers} >= EXPECTED_LAYERS
    assert report.summary().startswith(f"{len(report.layers)} isolation layers active")


def test_a_sample_sees_the_sandbox_from_inside(service: ExecutionService) -> None:
    import json

    result = service.run(ExecutionRequest(INSIDE))
    facts = json.loads(result.stdout)
    # Two ids: the zygote's (0) and the samples' (1), both nobody outside.
    zygote, zygote_host, _, sample, sample_host, _ = facts["uid_map"]
    assert (zygote, sample) == ("0", "1") and 0 not in (int(zygote_host), int(sample_host))
    assert facts["uid"] == 1
    assert facts["pids"]  # its own pid namespace, the zygote hidden: only itself
    assert facts["hostname"] == "sandbox"
    assert facts["seccomp"] == "2" and facts["no_new_privs"] == "1"
    assert int(facts["cap_eff"], 16) == 0
    # Only the system directories and the way to the interpreter exist.
    spec = root_spec()
    paths = [bind["target"] for bind in spec["binds"]] + list(spec["symlinks"]) + spec["dirs"]
    expected = {path.split("/")[1] for path in paths} | {"proc", "etc", RESIDENT_ROOT[1:]}
    assert set(facts["root"]) == expected
    home_like = {"home", "work", "root", "run", "sys", "var", "mnt", "opt", "srv"}
    assert home_like & set(facts["root"]) <= {path.split("/")[1] for path in interpreter_dirs()}
    assert "/tmp" in facts["mounts"] and facts["cwd"] == "/tmp"
    assert "EVALSWEEP_SECRET_FOR_TEST" not in facts["env"]


# What a split run sees of the file systems: printed from inside the function the test calls.
SPLIT_VIEW = """
import json, os, subprocess, sys, sqlite3, ssl, lzma, zoneinfo

def f():
    kinds = sorted({line.split(" - ")[1].split()[0] for line in open("/proc/self/mountinfo")})
    child = subprocess.run([sys.executable, "-c", "import decimal; print(7)"],
                           capture_output=True, text=True).stdout.strip()
    print(json.dumps({"kinds": kinds, "child": child, "stdlib": os.path.isfile(os.__file__),
                      "zone": str(zoneinfo.ZoneInfo("Europe/Paris"))}))
    return 1
"""
RETURNS_ONE = "def check(candidate):\n    assert candidate() == 1\n"
# File systems whose pages are in memory, always: no run can add or evict one.
IN_MEMORY = {"tmpfs", "proc", "devtmpfs"}


@pytest.mark.parametrize("installed", [False, True])
def test_a_split_run_sees_only_files_in_memory(service: ExecutionService, installed: bool) -> None:
    """A split run's root holds no file of a disk, so the page cache says nothing to it; the
    bare interpreter is all there (its standard library, extension modules and their
    libraries, and it starts itself). With installed packages, the split run sees the disk."""
    limits = Limits(installed_packages=installed)
    result = service.run(
        ExecutionRequest(SPLIT_VIEW, test=FunctionTest(RETURNS_ONE, "f"), limits=limits)
    )
    assert result.verdict.passed, result.verdict
    seen = json.loads(result.stdout)
    assert seen["child"] == "7" and seen["stdlib"] and seen["zone"] == "Europe/Paris"
    if installed:
        assert not set(seen["kinds"]) <= IN_MEMORY, seen
    else:
        assert set(seen["kinds"]) <= IN_MEMORY, seen
    # A program run alone (not a split run) sees the system as a plain process does.
    alone = service.run(ExecutionRequest(SPLIT_VIEW + "f()\n"))
    assert not set(json.loads(alone.stdout)["kinds"]) <= IN_MEMORY


def test_a_program_that_needs_a_file_outside_the_split_root_is_unsupported(
    service: ExecutionService,
) -> None:
    """What one process can run but a split run cannot see is never a pass and never a
    failure: the judge cannot confirm the pass, and says so."""
    programs = [
        "import subprocess\n\ndef f():\n    subprocess.run(['true'], check=True)\n    return 1\n",
        "def f():\n    open('/usr/bin/env', 'rb').read(1)\n    return 1\n",
    ]
    results = service.run_many(
        [ExecutionRequest(program, test=FunctionTest(RETURNS_ONE, "f")) for program in programs]
    )
    for result in results:
        assert result.verdict.status == "unsupported", result.verdict
        assert "not confirmed" in result.verdict.reason


def test_the_callers_environment_never_reaches_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSWEEP_SECRET_FOR_TEST", "hunter2")
    with ExecutionService(workers=1) as fresh:
        result = fresh.run(ExecutionRequest("import os\nprint(sorted(os.environ.items()))"))
    assert "hunter2" not in result.stdout and "EVALSWEEP_SECRET_FOR_TEST" not in result.stdout


def test_a_program_s_environment_holds_no_python_variable(service: ExecutionService) -> None:
    """The interpreter reads ``PYTHON*`` variables while a program runs (``PYTHONBREAKPOINT``
    at every ``breakpoint()``); the one process the contract names (``python -I``) ignores
    them. Judged and unjudged programs alike see none, nor the zygotes' hash seed."""
    probe = "import os\nprint(sorted(k for k in os.environ if k.startswith('PYTHON')))\n"
    result = service.run(ExecutionRequest(probe))
    assert result.stdout == "[]\n", result.stdout
    judged = ExecutionRequest(
        "import os\ndef f():\n    return [k for k in os.environ if k.startswith('PYTHON')]\n",
        test=FunctionTest("def check(candidate):\n    assert candidate() == []\n", "f"),
    )
    assert service.run(judged).verdict.status == "passed"


def _sandbox_processes(uid_base: int, count: int) -> set[int]:
    pids = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/status") as handle:
                uid = next(line for line in handle if line.startswith("Uid:")).split()[1]
        except (OSError, StopIteration):
            continue
        if uid_base <= int(uid) < uid_base + count:
            pids.add(int(entry))
    return pids


def test_without_namespaces_seccomp_and_cgroups_the_service_degrades_and_says_so() -> None:
    disabled = ("namespaces", "seccomp", "cgroups")
    with ExecutionService(
        workers=1, limits=Limits(timeout=1.0), disable_layers=disabled
    ) as degraded:
        report: SandboxReport = degraded.report
        for name in (
            "pid namespace",
            "network namespace",
            "read-only root",
            "seccomp",
            "cgroup memory",
        ):
            assert name in report.missing
        for name in ("unprivileged identity", "resource limits", "clean environment", "output cap"):
            assert name in report.active
        # A detached grandchild is still found and killed, output still capped.
        daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\n"
        assert degraded.run(ExecutionRequest(daemon)).verdict.status == "passed"
        flood = "import os\nwhile True:\n    os.write(1, b'x' * 65536)\n"
        assert degraded.run(ExecutionRequest(flood)).verdict.reason == "output limit"
        secret = degraded.run(ExecutionRequest("print(open('/root/.bashrc').read())"))
        assert secret.verdict.status == "failed" and "PermissionError" in secret.verdict.detail
        worker = degraded._pool[0]
        zygotes = {
            box._zygote_pid for box in (worker.sample_box, worker.judge_box) if box is not None
        }
        time.sleep(0.1)
        assert _sandbox_processes(worker.settings.uid_base, 4) - zygotes == set()


def test_the_unsafe_mode_must_be_asked_for_and_is_reported() -> None:
    with ExecutionService(workers=1, unsafe_no_sandbox=True) as unsafe:
        assert unsafe.report.unsafe
        assert unsafe.report.summary() == "UNSAFE: samples run without a sandbox"
        assert unsafe.run(ExecutionRequest("print(2)", expected_stdout="2\n")).verdict.passed


def test_unknown_layers_cannot_be_disabled() -> None:
    with pytest.raises(ValueError, match="unknown layers"):
        ExecutionService(disable_layers=("firewall",))


UNPRIVILEGED = """
import json, sys
from evalsweep.execution import ExecutionRequest, ExecutionService, Limits
STATUS = "import os\\nprint(sorted(os.listdir('/')))\\nprint(open('/proc/self/status').read())"
with ExecutionService(
    workers=1, limits=Limits(timeout=2.0), native_loop=sys.argv[1] == "C"
) as service:
    report = service.report
    result = service.run(ExecutionRequest(STATUS))
lines = result.stdout.splitlines()
status = dict(line.split(":", 1) for line in lines if line.startswith(("Cap", "Seccomp:")))
print(json.dumps({
    "missing": report.missing,
    "verdict": result.verdict.status,
    "loop": report.sample_loop,
    "capabilities": status["CapEff"].strip(),
    "seccomp": status["Seccomp"].strip(),
}))
"""


@pytest.mark.parametrize("loop", ["C", "Python"])
def test_a_caller_without_root_gets_the_sandbox_through_a_user_namespace(
    request: pytest.FixtureRequest, loop: str
) -> None:
    # The system interpreter, as user nobody: only cgroups need root.
    python = shutil.which("python3", path="/usr/bin:/bin")
    setpriv = shutil.which("setpriv")
    if python is None or setpriv is None:
        pytest.skip("needs /usr/bin/python3 and setpriv (util-linux) to run as another user")
    # The clone may sit where only its owner can enter (a home folder, a `mktemp -d`
    # folder): the other user gets its own readable copy of the package, outside it.
    readable = Path(tempfile.mkdtemp(prefix="evalsweep-unprivileged-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(readable, ignore_errors=True))
    src = readable / "src"
    shutil.copytree(
        Path(__file__).resolve().parents[1] / "src" / "evalsweep",
        src / "evalsweep",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for folder in [readable, *src.rglob("*")]:
        folder.chmod(0o755 if folder.is_dir() else 0o644)
    readable.chmod(0o755)
    tmp_path = readable
    command = [
        setpriv,
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        python,
        "-c",
        UNPRIVILEGED,
        loop,
    ]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(src)}
    os.chmod(tmp_path, 0o777)
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    # The sample, root of its user namespace, holds no capability and runs
    # under the seccomp filter (mode 2), whichever loop confined it.
    # Without root, no cgroups, and no locking of the files the zygote maps beyond
    # RLIMIT_MEMLOCK (both reported).
    assert facts == {
        "missing": ["mapped files locked", "cgroup memory", "cgroup pids"],
        "verdict": "passed",
        "loop": loop,
        "capabilities": "0000000000000000",
        "seccomp": "2",
    }

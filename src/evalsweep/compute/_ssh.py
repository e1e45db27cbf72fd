"""A GPU machine the person already has, reached over ssh.

The same ``evalsweep run`` runs there: a setup step checks (or installs)
evalsweep on the host and reports which Python and evalsweep it found; the
sweep runs against a results store on the host, its progress and log lines
stream back over the ssh connection, and its rows come back in pieces of at
most 5 MB into the local store. Weights are pulled on the host (Hub
references) or read from its disk (folders); only results travel.

Every ssh command goes through the audited :class:`CommandRunner`.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from evalsweep import __version__
from evalsweep.compute._base import SweepJob, TargetInfo, TargetRun
from evalsweep.compute._cost import SpendMeter
from evalsweep.compute._runner import CommandResult, CommandRunner
from evalsweep.compute._stream import PREFIX, relay
from evalsweep.compute._transfer import PieceError, import_piece
from evalsweep.engine import Progress, stored_sweep
from evalsweep.errors import EvalsweepError, TargetError
from evalsweep.jsonl import LINE_END
from evalsweep.options import environment_names, tasks_value
from evalsweep.store import Store
from evalsweep.tasks import SUITES, get_task

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument

#: ssh's own exit status for connection and authentication failures.
SSH_FAILED = 255

_PROBE = (
    "import json, platform, shutil, socket, subprocess, sys\n"
    "try:\n"
    "    import evalsweep\n"
    "    found = {'evalsweep': evalsweep.__version__, 'evalsweep_path': evalsweep.__file__}\n"
    "except ImportError as exc:\n"
    "    found = {'evalsweep': None, 'error': str(exc)}\n"
    "gpus = []\n"
    "if shutil.which('nvidia-smi'):\n"
    "    query = ['nvidia-smi', '--query-gpu=name,memory.total', '--format=csv,noheader']\n"
    "    done = subprocess.run(query, capture_output=True, text=True, timeout=30)\n"
    "    gpus = [line.strip() for line in done.stdout.splitlines() if line.strip()]\n"
    "print(json.dumps({'python': sys.executable, 'python_version': platform.python_version(),"
    " 'host': socket.gethostname(), 'gpus': gpus, **found}))\n"
)


@dataclass
class SSHTarget:
    """A host reached with ``ssh [-p PORT] [-i KEY] user@host``.

    Args:
        name: the target's name in the configuration (or its ``ssh://`` URL).
        host: ``user@host`` or ``host`` (an alias from ``~/.ssh/config`` works too).
        port: ssh port.
        identity_file: private key to offer (only that key is offered when given).
        python: the Python on the host that has (or gets) evalsweep.
        workdir: folder on the host, relative to the login directory, for its
            results store and exported pieces.
        setup: shell command that installs evalsweep on the host when the probe does
            not find it (default: ``PYTHON -m pip install evalsweep==<this version>``).
        env: environment variables set for the remote run (not secret: they are part
            of the audited command line).
        secrets: names of evalsweep secrets (``evalsweep secrets set NAME``) the remote
            run gets as environment variables (``HF_TOKEN``...): sent on the ssh
            connection's stdin, never on the command line, and replaced by
            ``[secret NAME]`` wherever the run's output is shown or recorded.
        data_dir: benchmark data folder on the host (default: what ``--data-dir`` says).
        hourly_rate: what the host costs per hour (0 when already paid for).
        minimum_seconds: the provider's minimum billed time.
        hardware: what the host has, for price previews (e.g. ``1 x H100 80GB``).
        known_hosts: ``UserKnownHostsFile`` for this host (default: ssh's own).
        connect_timeout: seconds to wait for the connection.
    """

    name: str
    host: str
    port: int = 22
    identity_file: str | None = None
    python: str = "python3"
    workdir: str = ".evalsweep-remote"
    setup: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    data_dir: str | None = None
    hourly_rate: float = 0.0
    minimum_seconds: int = 0
    currency: str = "USD"
    hardware: str = "ssh host"
    known_hosts: str | None = None
    connect_timeout: int = 10
    kind: str = "ssh"

    def info(self) -> TargetInfo:
        return TargetInfo(
            name=self.name,
            kind=self.kind,
            hardware=self.hardware,
            hourly_rate=self.hourly_rate,
            currency=self.currency,
            lifecycle=False,
            details={"host": self.host, "port": self.port, "python": self.python},
        )

    # -- commands ---------------------------------------------------------------------------

    def ssh_argv(self, remote_command: str) -> list[str]:
        """The ssh command line that runs ``remote_command`` on the host."""
        argv = ["ssh", "-p", str(self.port), "-o", "BatchMode=yes"]
        argv += ["-o", f"ConnectTimeout={self.connect_timeout}"]
        argv += ["-o", "StrictHostKeyChecking=accept-new"]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.identity_file:
            argv += ["-i", self.identity_file, "-o", "IdentitiesOnly=yes"]
        return [*argv, self.host, "--", remote_command]

    def _python(self, args: Sequence[str]) -> str:
        """A shell command running the host's Python with the target's environment."""
        # The host's own EVALSWEEP_DATA_DIR / _TARGET / _STORE are unset: the words say
        # the sweep (the target's configured env, set after, is the person's choice).
        unset = [word for name in environment_names() for word in ("-u", name)]
        env = [f"{key}={value}" for key, value in sorted(self.env.items())]
        return shlex.join(["env", *unset, *env, self.python, *args])

    def _evalsweep(self, args: Sequence[str]) -> str:
        return self._python(["-m", "evalsweep", *args])

    def _ssh(self, runner: CommandRunner, command: str, kind: str, **kwargs: Any) -> CommandResult:
        ran = runner.run(self.ssh_argv(command), kind=kind, **kwargs)
        if ran.exit_code == SSH_FAILED:
            raise self._connection_error(ran)
        return ran

    def _connection_error(self, ran: CommandResult) -> TargetError:
        messages = _ssh_messages(ran)
        line = messages[-1] if messages else ran.last_error_line()
        where = f"{self.host} port {self.port}"
        if "Permission denied" in line or "publickey" in line:
            key = self.identity_file or "the offered keys"
            return TargetError(f"ssh target {self.name}: {where} refused {key} ({line})")
        return TargetError(f"ssh target {self.name}: cannot reach {where} ({line})")

    # -- setup ------------------------------------------------------------------------------

    def prepare(self, runner: CommandRunner, progress: Progress) -> dict[str, Any]:
        """Find evalsweep on the host (installing it with the setup command if missing).

        Returns:
            The setup report: which Python and which evalsweep the host has.
        """
        probe = self._python(["-c", _PROBE])
        found = self._probe(runner, probe)
        if found.get("evalsweep"):
            return {**found, "installed_by_setup": False}
        setup = self.setup or shlex.join(
            [self.python, "-m", "pip", "install", "-q", f"evalsweep=={__version__}"]
        )
        progress.note(f"{self.name}: evalsweep not found on {self.host}; running setup: {setup}")
        ran = self._ssh(runner, setup, "setup", on_line=lambda line: progress.note(line))
        found = self._probe(runner, probe)
        if ran.exit_code != 0 or not found.get("evalsweep"):
            raise TargetError(
                f"ssh target {self.name}: evalsweep is not installed on {self.host} and the "
                f"setup command failed ({ran.last_error_line()})"
            )
        return {**found, "installed_by_setup": True, "setup": setup}

    def _probe(self, runner: CommandRunner, probe: str) -> dict[str, Any]:
        ran = self._ssh(runner, probe, "setup")
        if ran.exit_code != 0:
            raise TargetError(
                f"ssh target {self.name}: {self.python} does not run on {self.host} "
                f"({ran.last_error_line()})"
            )
        try:
            return dict(json.loads(ran.stdout.strip().split(LINE_END)[-1].decode()))
        except (ValueError, IndexError):
            raise TargetError(
                f"ssh target {self.name}: unexpected answer from {self.python} on {self.host}"
            ) from None

    # -- the sweep --------------------------------------------------------------------------

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        values = secret_values(self.secrets)
        runner = CommandRunner(store, self.name)  # masks every stored secret
        self._secret_values = values
        meter = SpendMeter(self.hourly_rate, self.minimum_seconds, self.currency)
        meter.start()
        try:
            setup = self.prepare(runner, progress)
            progress.note(
                f"{self.name}: {setup['host']} has evalsweep {setup['evalsweep']} "
                f"on {setup['python']} (Python {setup['python_version']})"
            )
            document = self._run_remote(job, runner, _SpendNotes(progress, meter, self.name))
        finally:
            meter.stop()
        references = list(job.spec.checkpoints)
        tasks = [
            t if t in SUITES else get_task(t).name if isinstance(t, str) else t.name
            for t in job.spec.tasks
        ]  # a suite is expanded by stored_sweep, at its own few-shot counts
        result = stored_sweep(store, references, tasks, job.spec.num_fewshot)
        compute = {**self.info().as_dict(), "setup": setup, "spend": meter.as_dict()}
        compute["secrets"] = sorted(self.secrets)  # names only, never values
        return TargetRun(result, compute, document)

    def _run_remote(
        self, job: SweepJob, runner: CommandRunner, progress: Progress
    ) -> ResultDocument:
        store_path = f"{self.workdir}/results.sqlite"
        remote = job
        if self.data_dir:  # the host's own copy of the benchmark data
            remote = replace(job, spec=replace(job.spec, data_dir=self.data_dir))
        values = getattr(self, "_secret_values", {})
        extra = ["--env-stdin"] if values else []
        # Where results go and how they are shown first: run_args ends with -- and references.
        here = ["--store", store_path, "--json", "--progress-lines", *extra]
        command = (
            shlex.join(["mkdir", "-p", self.workdir])
            + " && "
            + self._evalsweep(["run", *here, *remote.run_args])
        )
        ran = runner.run(
            self.ssh_argv(command),
            kind="command",
            on_line=lambda line: relay(line, progress, f"{self.name}: "),
            detail={"job": "sweep", "secrets": sorted(values)},
            stdin=json.dumps(values).encode() + b"\n" if values else None,
        )
        if ran.exit_code not in (0, 3):  # 3: a regression verdict with --fail-on-regression
            pulled = self._pull_quietly(job, runner, progress, store_path)
            kept = f"; {pulled} finished rows brought back" if pulled else ""
            if ran.exit_code == SSH_FAILED and _ssh_messages(ran):
                error = self._connection_error(ran)
                raise TargetError(f"{error} during the sweep{kept}; run the same command to resume")
            raise TargetError(
                f"ssh target {self.name}: the sweep failed on {self.host}: "
                f"{_failure_reason(ran)}{kept}; run the same command to resume"
            )
        from evalsweep.report import parse_document

        self.pull(job, runner, progress, store_path)
        if not ran.stdout.strip():
            raise TargetError(
                f"ssh target {self.name}: the sweep on {self.host} printed no result document"
            )
        where = f"ssh target {self.name}: the result document the sweep on {self.host} printed"
        return parse_document(ran.stdout, where)

    def pull(
        self, job: SweepJob, runner: CommandRunner, progress: Progress, store_path: str
    ) -> int:
        """Export the sweep's rows on the host and bring them into the local store.

        Returns:
            Rows imported.
        """
        folder = f"{self.workdir}/pieces-{uuid.uuid4().hex[:8]}"
        # As the remote run was given them: a task file is named by its path there.
        tasks = [t if isinstance(t, str) else t.name for t in job.spec.tasks]
        export = self._evalsweep(
            ["export-results", "--tasks", tasks_value(tasks)]
            + ["--store", store_path, "--out", folder, "--json", "--", *job.spec.checkpoints]
        )
        ran = self._ssh(runner, export, "transfer")
        if ran.exit_code != 0:
            raise TargetError(
                f"ssh target {self.name}: exporting results on {self.host} failed "
                f"({_strip_prefix(ran.last_error_line())})"
            )
        try:
            pieces = json.loads(ran.stdout.decode())["pieces"]
        except (ValueError, KeyError, TypeError):
            raise TargetError(
                f"ssh target {self.name}: export-results on {self.host} printed no list of "
                "pieces; run the same command to resume"
            ) from None
        progress.start(f"{self.name}: results", len(pieces))
        rows = done = 0
        try:
            for piece in pieces:
                path = f"{folder}/{piece['name']}"
                got = self._ssh(runner, shlex.join(["cat", path]), "transfer")
                if got.exit_code != 0:
                    raise TargetError(
                        f"ssh target {self.name}: cannot read {path} ({got.last_error_line()})"
                        f"{_kept(done)}; run the same command to resume"
                    )
                try:
                    rows += import_piece(
                        runner.store,
                        got.stdout,
                        piece["sha256"],
                        name=f"{self.host}:{path}",
                        expected_rows=piece.get("rows"),
                    )
                except PieceError as exc:
                    raise TargetError(
                        f"ssh target {self.name}: {exc}{_kept(done)}; run the same command "
                        "to resume (the host keeps every row)"
                    ) from None
                done += 1
                progress.advance(1)
        finally:
            progress.finish()
            # The host's store keeps every row: the pieces are only this pull's copies.
            runner.run(self.ssh_argv(shlex.join(["rm", "-rf", folder])), kind="transfer")
        return rows

    def _pull_quietly(
        self, job: SweepJob, runner: CommandRunner, progress: Progress, store_path: str
    ) -> int:
        """Bring back what a failed sweep finished; 0 when the host cannot be reached."""
        try:
            return self.pull(job, runner, progress, store_path)
        except (EvalsweepError, ValueError, KeyError):
            return 0


class _SpendNotes:
    """Progress that also notes the spend so far, at most every ``interval`` seconds."""

    def __init__(self, progress: Progress, meter: SpendMeter, name: str, interval: float = 30):
        self.progress, self.meter, self.name, self.interval = progress, meter, name, interval
        self._last = time.monotonic()

    def _tick(self) -> None:
        if self.meter.hourly_rate and time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            self.progress.note(f"{self.name}: {self.meter.describe()}")

    def start(self, label: str, total: int) -> None:
        self.progress.start(label, total)

    def advance(self, count: int) -> None:
        self.progress.advance(count)
        self._tick()

    def finish(self) -> None:
        self.progress.finish()

    def note(self, message: str) -> None:
        self.progress.note(message)
        self._tick()


def _kept(done: int) -> str:
    """What a failed pull has already written to the local store."""
    return f"; the rows of the {done} pieces before it are in the local store" if done else ""


def secret_values(names: Sequence[str]) -> dict[str, str]:
    """The values of the named evalsweep secrets (a clear error for a name not stored)."""
    if not names:
        return {}
    from evalsweep.errors import ConfigError
    from evalsweep.secrets import SecretBox

    box = SecretBox()
    stored = box.environment()
    missing = [name for name in names if name not in stored]
    if missing:
        raise ConfigError(
            f"no evalsweep secret named {', '.join(missing)} "
            f"(store it with: evalsweep secrets set {missing[0]})"
        )
    return {name: stored[name] for name in names}


def _ssh_messages(ran: CommandResult) -> list[str]:
    """Lines ssh itself wrote (connection and authentication trouble), not the remote's."""
    return [
        line.strip()
        for line in ran.stderr.decode(errors="replace").split("\n")
        if line.startswith(_SSH_MESSAGE_STARTS)
    ]


_SSH_MESSAGE_STARTS = (
    "ssh:", "Connection ", "client_loop:", "packet_write", "Timeout", "Permission denied",
    "kex_", "Host key verification", "Load key", "no such identity", "Warning: Identity",
)  # fmt: skip


def _failure_reason(ran: CommandResult) -> str:
    """The remote error line, or how the remote process ended (not a progress line)."""
    if ran.exit_code == SSH_FAILED:  # no message from ssh: the remote side ended by a signal
        return "the remote process was killed or its session ended"
    if ran.exit_code > 128:
        return f"the remote process was killed (signal {ran.exit_code - 128})"
    lines = [
        line.strip()
        for line in ran.stderr.decode(errors="replace").split("\n")
        if line.strip() and not line.startswith(PREFIX)
    ]
    return _strip_prefix(lines[-1]) if lines else f"exit status {ran.exit_code}"


def _strip_prefix(line: str) -> str:
    return line.removeprefix("evalsweep: error: ")

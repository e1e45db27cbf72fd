"""Background sweeps: started detached, tracked in the store, stopped on limits.

A job is ``python -m evalsweep run ... --store STORE --out DIR --target NAME`` (the
quote's target: this machine, or an ssh host, cloud GPU or Ray cluster) under the
supervisor (``_supervise``), in its own process group. Its quote, parameters,
pid, status, times and spend live in the store, so after a server restart
``status`` reads the row, checks that the pid is still the same process, and
reads progress from the store and the log. The watchdog bills running work
each tick and stops the newest job when a limit would be crossed before the
next tick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalsweep._atomic import atomic_write
from evalsweep.agent import _ledger as ledger
from evalsweep.agent._estimate import progress
from evalsweep.agent._options import quoted_spec
from evalsweep.agent._quotes import GateError, Quote
from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.agent._settings import AgentSettings
from evalsweep.agent._supervise import REDACT_ENV
from evalsweep.errors import EvalsweepError
from evalsweep.options import to_argv, words_only_environment
from evalsweep.runs import pinned_value
from evalsweep.secrets import SecretBox, mask, redactor, secret_spans, spelled_length
from evalsweep.statedir import NotPrivate, open_own_file, open_private_dir
from evalsweep.store import Store
from evalsweep.text import visible

COLUMNS = (
    "job_id, quote_id, connection, target, params, plan, argv, out_dir, log_path, pid, "
    "pid_start, status, reason, exit_code, started, ended, deadline, work, loads, audit_id, "
    "estimated_s, progress"
)
KILL_GRACE_S = 10.0
#: How long a job may show no pid after its start (its supervisor records its own pid as
#: it starts, and the server once it has launched it) before it counts as never started.
START_GRACE_S = 60.0
#: The variable every process of a job carries, with the job's id as its value.
JOB_ENV = "EVALSWEEP_AGENT_JOB"
#: The supervisor stops a job this long before its reserved deadline, so that the
#: seconds a stop takes are inside the reservation (it kills after STOP_GRACE_S).
STOP_MARGIN_S = 1.5
#: What the supervisor gives a job between its stop signal and the kill.
STOP_GRACE_S = 0.5


def supervisor_deadline(reservation: ledger.Reservation) -> float:
    """When the supervisor stops the job: inside the reservation, with room to stop."""
    margin = min(STOP_MARGIN_S, reservation.seconds / 4)
    return reservation.deadline - margin


def job_command(
    params: dict[str, Any], target: str, store_path: Path, out_dir: Path, data_dir: str | None
) -> list[str]:
    """The job's ``evalsweep run`` as an argument list: where results go first, then the
    quoted sweep as :func:`evalsweep.options.to_argv` writes it (its options, then ``--``
    and the references, so no reference can be read as an option)."""
    spec = quoted_spec({**params, "data_dir": data_dir})
    # The job refuses checkpoints that no longer resolve to what the person approved.
    # The job refuses to run what the person did not approve: checkpoints that no longer
    # resolve to the approved identities, prompts (task files, data) that changed.
    if params.get("identities"):
        spec = dataclasses.replace(spec, expect_identities=" ".join(params["identities"]))
    if params.get("work_hash"):
        spec = dataclasses.replace(spec, expect_work=params["work_hash"])
    command = [sys.executable, "-m", "evalsweep", "run"]
    command += ["--store", str(store_path), "--out", str(out_dir)]
    # Exactly the quote's checkpoints, in the quote's order: never expanded again (a run,
    # a name that reads as a Hub pattern) nor reordered; the steps are the quote's.
    steps = (params.get("run") or {}).get("steps", {})
    command += ["--pinned", pinned_value(list(params["checkpoints"]), steps)]
    # Always named: an inherited EVALSWEEP_TARGET must not move the job elsewhere.
    command += ["--target", target, "--progress-lines"]
    return [*command, *to_argv(spec)]


class JobError(EvalsweepError):
    """An unknown job, or one that cannot do what was asked in its state."""


class Jobs:
    """The jobs of one results store."""

    def __init__(
        self, store: Store, settings: AgentSettings, secret_box: SecretBox, jobs_dir: Path
    ) -> None:
        self.store = store
        self.settings = settings
        self.secrets = secret_box
        self.jobs_dir = jobs_dir
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        ensure_agent_tables(store)

    # -- starting ---------------------------------------------------------------------------

    @staticmethod
    def new_id() -> str:
        return "j-" + secrets.token_hex(5)

    def reserve(self, item: str, connection: str, quote: Quote, kind: str) -> ledger.Reservation:
        """Reserve the worst case of ``quote``'s work against both limits (see ``_ledger``),
        never more than the worst case the quote showed (what the person approved).

        Raises:
            GateError: when the limits are not set for paid work, or do not leave
                enough for the estimate after what is spent and reserved, or the quote's
                worst case is less than its estimate (the limits had no room when it was
                quoted): quote again.
        """
        approved = float(quote.preview.get("max_cost", 0.0))
        limits = self.settings.ledger_limits()
        unset = limits.per_connection_usd <= 0 or limits.global_usd <= 0  # the ledger says so
        if quote.hourly_rate > 0 and not unset and approved < quote.estimated_cost:
            raise GateError(
                f"quote {quote.quote_id} showed a worst case of ${approved:.4f}, less than its "
                f"estimate ${quote.estimated_cost:.4f} (the spend limits had no room when it "
                "was quoted); the work would be stopped before it finishes: quote again"
            )
        try:
            return ledger.reserve(
                self.store,
                item,
                kind=kind,
                connection=connection,
                target=quote.target,
                hourly_rate=quote.hourly_rate,
                limits=limits,
                needed_usd=quote.estimated_cost,
                cap_usd=approved,
            )
        except ledger.BudgetError as exc:
            raise GateError(str(exc)) from None

    def start(
        self,
        quote: Quote,
        connection: str,
        reservation: ledger.Reservation,
        *,
        store_path: Path,
        data_dir: str | None,
        plan: list[dict[str, Any]],
        work: float,
        loads: int,
    ) -> str:
        """Start the quoted sweep detached under ``reservation``; returns the job id at once.

        Whatever fails before the job's supervisor is started (its folder, the audit entry,
        the job's row) leaves nothing held: the reservation is dropped (or the recorded
        job ends as failed, which closes it), and the error is raised.
        """
        launched: list[int] = []
        try:
            return self._launch(
                quote,
                connection,
                reservation,
                launched,
                store_path=store_path,
                data_dir=data_dir,
                plan=plan,
                work=work,
                loads=loads,
            )
        except BaseException:
            if not launched:
                job_id = reservation.item
                recorded = self.store.connection.execute(
                    "SELECT 1 FROM agent_jobs WHERE job_id = ?", (job_id,)
                ).fetchone()
                if recorded:
                    self._finish(job_id, "failed", "could not start", reservation.started)
                else:
                    ledger.release(self.store, job_id)
            raise

    def _launch(
        self,
        quote: Quote,
        connection: str,
        reservation: ledger.Reservation,
        launched: list[int],
        *,
        store_path: Path,
        data_dir: str | None,
        plan: list[dict[str, Any]],
        work: float,
        loads: int,
    ) -> str:
        params = quote.params
        job_id = reservation.item
        job_dir = self.jobs_dir / job_id
        out_dir = job_dir / "out"
        log_path = job_dir / "log.txt"
        # The jobs folder is private (the one rule, statedir.open_private_dir): a job's log
        # holds what the job printed, and no one else may place or swap anything in it.
        jobs = _private(self.jobs_dir, create=True)
        try:
            os.mkdir(job_id, 0o700, dir_fd=jobs)
        finally:
            os.close(jobs)
        command = job_command(params, quote.target, store_path, out_dir, data_dir)
        deadline = reservation.deadline
        stop_at = supervisor_deadline(reservation)
        supervisor = [sys.executable, "-m", "evalsweep.agent._supervise", "--store"]
        supervisor += [str(store_path), "--job", job_id, "--log", str(log_path)]
        audit_id = self.store.audit_begin(
            "command",
            self.secrets.redact(shlex.join(command)),
            target=quote.target,
            detail={
                "job": job_id,
                "quote": quote.quote_id,
                "connection": connection,
                "hourly_rate": reservation.hourly_rate,
                "reserved_usd": round(reservation.reserved_usd, 6),
                "deadline": round(deadline, 3),
                "under": shlex.join(supervisor) + " --audit ID --deadline " + f"{stop_at:.3f}",
            },
        )
        supervisor += ["--audit", str(audit_id), "--deadline", f"{stop_at:.3f}", "--", *command]
        estimated = float(quote.preview.get("estimated_seconds", 0.0))
        with self.store.connection:
            self.store.connection.execute(
                f"INSERT INTO agent_jobs ({COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, 'running', NULL, NULL, "
                "?, NULL, ?, ?, ?, ?, ?, NULL)",
                (
                    job_id,
                    quote.quote_id,
                    connection,
                    quote.target,
                    json.dumps(params),
                    json.dumps(plan),
                    self.secrets.redact(shlex.join(command)),
                    str(out_dir),
                    str(log_path),
                    reservation.started,
                    deadline,
                    work,
                    loads,
                    audit_id,
                    estimated,
                ),
            )
        secret_values = self.secrets.environment()
        # The job's words say the whole sweep: no EVALSWEEP_DATA_DIR (or secret named
        # like a setting) of this process may change it behind them.
        env = words_only_environment(os.environ, secret_values)
        env[REDACT_ENV] = ",".join(sorted(secret_values))
        env[JOB_ENV] = job_id  # every process of the job carries it (see job_processes)
        first = f"$ {self.secrets.redact(shlex.join(command))}\n".encode()
        atomic_write(log_path, first, mode=0o600, exclusive=True)
        try:
            child = subprocess.Popen(
                supervisor,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=_open_log(log_path, os.O_WRONLY | os.O_APPEND),  # the child keeps it
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._finish(job_id, "failed", f"could not start: {exc.strerror}", None)
            self.store.audit_end(audit_id, None, 0)
            raise JobError(f"job {job_id}: could not start the sweep: {exc.strerror}") from None
        launched.append(child.pid)
        self._children[child.pid] = child
        with self.store.connection:
            self.store.connection.execute(
                "UPDATE agent_jobs SET pid = ?, pid_start = ? WHERE job_id = ?",
                (child.pid, _start_time(child.pid), job_id),
            )
        return job_id

    # -- reading ----------------------------------------------------------------------------

    def row(self, job_id: str) -> dict[str, Any]:
        found = self.store.connection.execute(
            f"SELECT {COLUMNS} FROM agent_jobs WHERE job_id = ?", (job_id,)
        ).fetchone()
        if found is None:
            raise JobError(f"no job {job_id!r} in {self.store.path}")
        names = [c.strip() for c in COLUMNS.split(",")]
        job = dict(zip(names, found, strict=True))
        job["params"] = json.loads(job["params"])
        job["plan"] = json.loads(job["plan"])
        return job

    def refresh(self, job_id: str) -> dict[str, Any]:
        """The job's row, after checking that a 'running' job's process is still there."""
        job = self.row(job_id)
        if job["status"] == "running" and not self._alive(job["pid"], job["pid_start"]):
            job = self.row(job_id)  # the supervisor may have just written its end
            if job["status"] == "running":
                self._lost(job)
                job = self.row(job_id)
        if job["status"] != "running":
            self._settle(job)
            if job["audit_id"]:
                self._close_audit(job)
        return job

    def _lost(self, job: dict[str, Any]) -> None:
        """A 'running' job whose supervisor is not there. Still starting (no pid recorded
        yet, within ``START_GRACE_S``): left running. Its own processes still there without
        their supervisor: they are stopped (nothing would stop them at their deadline) and
        billed until now. Otherwise it ended unrecorded: billed to its log's last write."""
        job_id = job["job_id"]
        if job["pid"] is None:
            if time.time() - job["started"] < START_GRACE_S:
                return
            self._finish(job_id, "lost", "its supervisor never started", job["started"])
            return
        members = job_processes(job_id)
        if members:
            if not stop_processes(job_id):
                return  # not gone yet: still running, and billed
            self._finish(
                job_id, "lost", "its supervisor disappeared; its processes were stopped", None
            )
            self.store.audit_event(
                "stop",
                f"stop job {job_id}: its supervisor disappeared, so its processes were stopped",
                target=job["target"],
                detail={"job": job_id, "pids": members},
            )
            return
        log = Path(job["log_path"])
        ended = log.stat().st_mtime if log.exists() else time.time()
        self._finish(job_id, "lost", "its supervising process disappeared", ended)

    def _close_audit(self, job: dict[str, Any]) -> None:
        """End the command's audit entry when its supervisor died before it could."""
        open_entry = self.store.connection.execute(
            "SELECT 1 FROM audit WHERE id = ? AND ended IS NULL", (job["audit_id"],)
        ).fetchone()
        if open_entry and not self._alive(job["pid"], job["pid_start"]):
            self.store.audit_end(job["audit_id"], job["exit_code"], _size(Path(job["log_path"])))

    def status(self, job_id: str) -> dict[str, Any]:
        job = self.refresh(job_id)
        parts = live_progress(self.store, job)
        end = job["ended"] or time.time()
        ledger_row = self.store.connection.execute(
            "SELECT hourly_rate, hourly_rate * (MAX(COALESCE(ended, ?), started) - started) "
            "/ 3600.0, reserved FROM agent_ledger WHERE item = ?",
            (time.time(), job_id),
        ).fetchone()
        rate, spend, reserved = ledger_row if ledger_row else (0.0, 0.0, 0.0)
        actual = round(job["ended"] - job["started"], 1) if job["ended"] else None
        estimated = job["estimated_s"]
        return {
            "job_id": job_id,
            "status": job["status"],
            "reason": job["reason"],
            "exit_code": job["exit_code"],
            "target": job["target"],
            "quote_id": job["quote_id"],
            "started": job["started"],
            "ended": job["ended"],
            "elapsed_s": round(end - job["started"], 1),
            "deadline": job["deadline"],
            "estimated_s": None if estimated is None else round(float(estimated), 1),
            "actual_s": actual,
            "documents_done": sum(p["documents_done"] for p in parts),
            "documents_total": sum(p["documents_total"] for p in parts),
            "progress": parts,
            "hourly_rate": float(rate),
            "reserved_usd": round(float(reserved), 6),
            "spend_usd": round(float(spend), 6),
            "last_log_line": visible(_last_line(Path(job["log_path"]), self.secrets)),
            "log_bytes": _size(Path(job["log_path"])),
        }

    def logs(self, job_id: str, offset: int, max_bytes: int) -> tuple[str, int, int]:
        """(text, next offset, log size): at most ``max_bytes`` of the log from ``offset``.

        Secrets are redacted over the stream, not the page: a page never ends inside
        a secret's value (it stops before it, or takes it whole), and a page that
        starts inside one starts with its mask. Pages end on character boundaries.
        """
        if max_bytes < 1:
            raise JobError("max_bytes must be 1 or more")
        job = self.row(job_id)
        path = Path(job["log_path"])
        values = self.secrets.environment()
        log = _open_log(path, os.O_RDONLY)
        size = os.fstat(log).st_size
        if offset < 0 or offset > size:
            os.close(log)
            raise JobError(f"job {job_id}: offset {offset} is outside the log (0..{size})")
        longest = max((spelled_length(v) for v in values.values()), default=1)
        begin = max(offset - longest + 1, 0)
        with os.fdopen(log, "rb") as handle:
            handle.seek(begin)
            # A few bytes beyond the page too: enough to see whether it ends inside a
            # character (a UTF-8 sequence is at most 4 bytes).
            window = handle.read(offset - begin + max_bytes + longest + 3)
        # Every spelling of every value the masks cover (one byte, one character), so a
        # page never ends inside any of them.
        spans = [
            (begin + start, begin + stop, mask(names).encode())
            for start, stop, names in secret_spans(window.decode("latin-1"), values)
        ]
        end = min(offset + max_bytes, begin + len(window))
        for start, stop, _ in spans:
            if start < end < stop:
                end = start if start > offset else stop
        end = _char_boundary(window, begin, offset, end, spans)
        text = b""
        cursor = offset
        for start, stop, masked in spans:
            if stop <= offset or start >= end:
                continue
            text += window[cursor - begin : max(start, cursor) - begin] + masked
            cursor = stop
        text += window[cursor - begin : end - begin] if cursor < end else b""
        return self.secrets.redact(text.decode(errors="replace")), end, size

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.store.connection.execute(
            "SELECT job_id FROM agent_jobs ORDER BY started DESC LIMIT ?", (limit,)
        ).fetchall()
        return [self.status(r[0]) for r in rows]

    # -- stopping ---------------------------------------------------------------------------

    def cancel(self, job_id: str, *, status: str = "cancelled", reason: str = "cancelled") -> bool:
        """Stop a running job's whole process group; False when it had already ended."""
        job = self.refresh(job_id)
        if job["status"] != "running":
            return False
        pid, start = job["pid"], job["pid_start"]
        starting = pid is None and time.time() - job["started"] < START_GRACE_S
        if not starting and not (pid and self._alive(pid, start)):
            self._finish(job_id, status, reason, None)
            return True
        # Billing ends when the job has stopped, not when it was asked to: its ledger item
        # stays open (its reservation cut to what it may spend while it stops) until its
        # supervisor records the exit, or the kill below is sent.
        with self.store.connection:
            # ``ended`` says when the stop was asked for until the supervisor records the
            # exit (it writes the real time).
            self.store.connection.execute(
                "UPDATE agent_jobs SET status = ?, reason = ?, ended = COALESCE(ended, ?) "
                "WHERE job_id = ? AND status = 'running'",
                (status, reason, time.time(), job_id),
            )
        ledger.stopping(self.store, job_id, KILL_GRACE_S)
        self.store.audit_event(
            "stop", f"stop job {job_id}: {reason}", target=job["target"], detail={"job": job_id}
        )
        if starting:  # its supervisor reads the status as it starts, and stops there
            return True
        _signal_group(pid, signal.SIGTERM)
        timer = threading.Timer(KILL_GRACE_S, self._kill_if_alive, (job_id, pid, start))
        timer.daemon = True
        timer.start()
        return True

    def _kill_if_alive(self, job_id: str, pid: int, start: str | None) -> None:
        """The end of a stop's grace: kill the job's group if it is still there, and end its
        billing now (its supervisor, killed too, cannot record it)."""
        if _same_process(pid, start):
            _signal_group(pid, signal.SIGKILL)
            with Store(self.store.path) as own:  # this runs in the timer's thread
                ledger.close_item(own, job_id)

    def _settle(self, job: dict[str, Any]) -> None:
        """End the billing of a job that is no longer running whose process has gone
        without recording its end (its supervisor was killed by the stop before it could):
        at the later of the stop and its log's last write."""
        open_item = self.store.connection.execute(
            "SELECT 1 FROM agent_ledger WHERE item = ? AND ended IS NULL", (job["job_id"],)
        ).fetchone()
        if job["pid"] is None and time.time() - job["started"] < START_GRACE_S:
            return  # its supervisor may still be starting: it records the end itself
        if not open_item or self._alive(job["pid"], job["pid_start"]):
            return
        if job_processes(job["job_id"]):  # its processes outlived their supervisor
            if stop_processes(job["job_id"]):
                ledger.close_item(self.store, job["job_id"])  # billed until now
            return
        log = Path(job["log_path"])
        ended = max(log.stat().st_mtime if log.exists() else 0.0, job["ended"] or 0.0)
        ledger.close_item(self.store, job["job_id"], ended or time.time())

    def _finish(self, job_id: str, status: str, reason: str, ended: float | None) -> None:
        ended = ended or time.time()
        with self.store.connection:
            self.store.connection.execute(
                "UPDATE agent_jobs SET status = ?, reason = ?, ended = COALESCE(ended, ?) "
                "WHERE job_id = ? AND status = 'running'",
                (status, reason, ended, job_id),
            )
        ledger.close_item(self.store, job_id, ended)

    def _alive(self, pid: int | None, start: str | None) -> bool:
        if not pid:
            return False
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]  # reaped: our own child has exited
            return False
        return _same_process(pid, start)

    def watchdog(self, stop_machine: Callable[[str, str], None] | None = None) -> list[str]:
        """One tick: bill, notice ended jobs, stop what would cross a limit. Returns messages."""
        messages: list[str] = []
        for (job_id,) in self.store.connection.execute(
            "SELECT job_id FROM agent_jobs WHERE status = 'running' "
            "OR audit_id IN (SELECT id FROM audit WHERE ended IS NULL)"
        ).fetchall():
            job = self.refresh(job_id)
            # The supervisor stops a job at its deadline; this is the backstop for a
            # supervisor that did not (it never stops one that has already ended).
            if job["status"] == "running" and time.time() > job["deadline"] + STOP_GRACE_S:
                self.cancel(job_id, status="stopped", reason="deadline reached")
                messages.append(f"{job_id}: deadline reached")
        for item, target in ledger.overdue_machines(self.store):
            why = "its reserved deadline (spend limit or max_job_hours) was reached"
            if stop_machine is not None:
                stop_machine(target, why)
            ledger.close_item(self.store, item)
            messages.append(f"{item}: stopped, {why}")
        ledger.charge(self.store)
        stopped: set[str] = set()
        while (over := self._over_limit(stopped)) is not None:
            (item, kind, _conn, target, _rate, _started), why = over
            stopped.add(item)
            if kind == "job":
                # Its item stays open, cut to what it may spend while it stops.
                if not self.cancel(item, status="stopped", reason=why):
                    ledger.stopping(self.store, item, KILL_GRACE_S)
            else:
                if stop_machine is not None:
                    stop_machine(target, why)
                ledger.close_item(self.store, item)
            messages.append(f"{item}: stopped, {why}")
        return messages

    def _over_limit(
        self, stopped: set[str]
    ) -> tuple[tuple[str, str, str, str, float, float], str] | None:
        """The newest priced item to stop when what is spent and reserved exceeds a limit.

        Every item's reservation fits the limits when it starts, so this happens only
        when the person lowered a limit meanwhile, or an item ran past its reservation.
        """
        s = self.settings
        now = time.time()
        since = now - s.global_window_days * 86400
        priced = [i for i in ledger.open_items(self.store) if i[4] > 0 and i[0] not in stopped]
        if not priced:
            return None
        if ledger.committed(self.store, since=since, now=now, overrun=False) > s.global_usd + 1e-9:
            return priced[0], f"global spend limit (${s.global_usd:.2f})"
        for item in priced:  # newest first
            if ledger.committed(self.store, connection=item[2], now=now, overrun=False) > (
                s.per_connection_usd + 1e-9
            ):
                return item, f"per-connection spend limit (${s.per_connection_usd:.2f})"
        return None


def job_processes(job_id: str) -> list[int]:
    """The pids of this machine's processes that belong to job ``job_id`` (their environment
    holds ``JOB_ENV=job_id``; a process that cleared its environment is not found)."""
    marker = f"{JOB_ENV}={job_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def stop_processes(job_id: str, wait_s: float = 2.0) -> bool:
    """Kill every process of job ``job_id``; True once none is left (within ``wait_s``)."""
    for pid in job_processes(job_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while job_processes(job_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19] if fields[0] != "Z" else None


def _same_process(pid: int, start: str | None) -> bool:
    now = _start_time(pid)
    if now is None:
        return False
    return start is None or now == start


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _private(folder: Path, *, create: bool) -> int:
    try:
        return open_private_dir(folder, create=create)
    except NotPrivate as exc:
        raise JobError(f"jobs {exc}") from None


def _open_log(path: Path, flags: int) -> int:
    """A job's log, opened only through private folders (the jobs folder and the job's) and
    only if it is the user's own regular file, never through a link: a log someone else
    placed or swapped is never read or written."""
    jobs = _private(path.parent.parent, create=False)
    os.close(jobs)
    job = _private(path.parent, create=False)
    try:
        return open_own_file(job, path.name, flags, str(path))
    except NotPrivate as exc:
        raise JobError(str(exc)) from None
    finally:
        os.close(job)


def _size(path: Path) -> int:
    """The log's size; 0 while there is none or it is not one to read."""
    try:
        log = _open_log(path, os.O_RDONLY)
    except (JobError, FileNotFoundError):
        return 0
    try:
        return os.fstat(log).st_size
    finally:
        os.close(log)


def _last_line(path: Path, secrets: SecretBox) -> str:
    """The log's last non-empty line, its last 500 characters, with every secret masked
    before anything is cut (a cut value would no longer be recognised as one)."""
    values = secrets.environment()
    try:
        log = _open_log(path, os.O_RDONLY)
    except (JobError, FileNotFoundError):
        return ""
    longest = max((spelled_length(v) for v in values.values()), default=0)
    size = os.fstat(log).st_size
    start = max(size - 4096 - longest, 0)
    with os.fdopen(log, "rb") as handle:
        handle.seek(start)
        tail = handle.read().decode(errors="replace")
    text = redactor(values)(tail).replace("\r", "\n")
    lines = text.split("\n")
    if start > 0:
        # The window's first line may have begun before it: its first characters may be the
        # end of a value that began before the window, which no mask could recognise.
        lines[0] = lines[0][longest:]
    kept = [line for line in lines if line.strip()]
    return kept[-1][-500:] if kept else ""


def live_progress(store: Store, job: dict[str, Any]) -> list[dict[str, Any]]:
    """Documents done per (checkpoint, task): those in the store, and while a part runs, the
    documents its answered requests cover (from the progress the job reports every few s)."""
    live: dict[str, list[int]] = json.loads(job.get("progress") or "{}")
    params = job["params"]
    identity_of = dict(
        zip(params.get("identities", []), params.get("checkpoints", []), strict=False)
    )
    parts = []
    for part in job["plan"]:
        stored, total = progress(store, [part])
        done = stored
        reference = identity_of.get(part["checkpoint"], part["checkpoint"])
        # A job on another target reports its parts as "TARGET: reference · task".
        label = f"{reference} · {part['task']}"
        answered = live.get(label) or live.get(f"{job['target']}: {label}")
        per_document = int(part.get("requests", 0)) / total if total else 0
        if answered and per_document > 0 and job["status"] == "running":
            requests_done, requests_total = int(answered[0]), int(answered[1])
            left = math.ceil(max(requests_total - requests_done, 0) / per_document)
            done = max(stored, min(total - left, total))
        parts.append(
            {
                "checkpoint": reference,
                "task": part["task"],
                "documents_done": done,
                "documents_total": total,
                "requests_done": int(answered[0]) if answered else None,
                "requests_total": int(answered[1]) if answered else None,
            }
        )
    return parts


def _char_boundary(
    window: bytes, begin: int, offset: int, end: int, spans: list[tuple[int, int, bytes]]
) -> int:
    """``end`` moved so the page does not split a UTF-8 sequence: back to the character's
    start, or, when the page would then be empty, on to its end."""
    if any(s < end <= e for s, e, _ in spans) or end <= offset:
        return end

    def inside(at: int) -> bool:  # the byte at ``at`` continues a character
        return at - begin < len(window) and (window[at - begin] & 0xC0) == 0x80

    cut = end
    while cut > offset and inside(cut):
        cut -= 1
    if cut > offset:
        return cut
    while inside(end) and end - begin < len(window):
        end += 1
    return end

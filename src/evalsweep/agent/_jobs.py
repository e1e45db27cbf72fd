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
import json
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

from evalsweep.agent import _ledger as ledger
from evalsweep.agent._estimate import progress
from evalsweep.agent._quotes import GateError, Quote
from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.agent._secrets import SecretBox
from evalsweep.agent._settings import AgentSettings
from evalsweep.agent._supervise import REDACT_ENV
from evalsweep.errors import EvalsweepError
from evalsweep.store import Store

COLUMNS = (
    "job_id, quote_id, connection, target, params, plan, argv, out_dir, log_path, pid, "
    "pid_start, status, reason, exit_code, started, ended, deadline, work, loads, audit_id"
)
KILL_GRACE_S = 10.0


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

    def check_budget(self, connection: str, cost: float, rate: float) -> None:
        """Refuse work whose estimate, with what runs already, would cross a limit."""
        if rate <= 0 and cost <= 0:
            return
        s = self.settings
        if s.per_connection_usd <= 0 or s.global_usd <= 0:
            raise GateError(
                "paid work needs spend limits: the person must set [limits] per_connection_usd "
                "and global_usd in their evalsweep configuration"
            )
        since = time.time() - s.global_window_days * 86400
        for scope, limit, spent, committed in (
            (
                "this connection's",
                s.per_connection_usd,
                ledger.spent(self.store, connection=connection),
                self._committed(connection),
            ),
            (
                "the global",
                s.global_usd,
                ledger.spent(self.store, since=since),
                self._committed(None),
            ),
        ):
            if spent + committed + cost > limit:
                raise GateError(
                    f"refused: {scope} spend limit is ${limit:.2f}; spent ${spent:.2f}, running "
                    f"work expected to cost ${committed:.2f} more, this sweep about ${cost:.2f}"
                )

    def _committed(self, connection: str | None) -> float:
        """Estimated cost still to come from running jobs."""
        query = (
            "SELECT q.estimated_cost, l.hourly_rate, l.started FROM agent_jobs j "
            "JOIN agent_quotes q ON q.quote_id = j.quote_id "
            "JOIN agent_ledger l ON l.item = j.job_id WHERE l.ended IS NULL"
        )
        args: list[Any] = []
        if connection is not None:
            query += " AND j.connection = ?"
            args.append(connection)
        now = time.time()
        return float(
            sum(
                max(cost - rate * (now - started) / 3600.0, 0.0)
                for cost, rate, started in self.store.connection.execute(query, args)
            )
        )

    def start(
        self,
        quote: Quote,
        connection: str,
        *,
        store_path: Path,
        data_dir: str | None,
        plan: list[dict[str, Any]],
        work: float,
        loads: int,
    ) -> str:
        """Start the quoted sweep detached; returns the job id at once."""
        params = quote.params
        job_id = "j-" + secrets.token_hex(5)
        job_dir = self.jobs_dir / job_id
        out_dir = job_dir / "out"
        log_path = job_dir / "log.txt"
        job_dir.mkdir(parents=True)
        command = [sys.executable, "-m", "evalsweep", "run", *params["checkpoints"]]
        command += ["--tasks", ",".join(params["tasks"]), "--store", str(store_path)]
        command += ["--out", str(out_dir), "--device", params["device"]]
        # Always named: an inherited EVALSWEEP_TARGET must not move the job elsewhere.
        command += ["--target", quote.target]
        if params.get("limit") is not None:
            command += ["--limit", str(params["limit"])]
        if params.get("num_fewshot") is not None:
            command += ["--num-fewshot", str(params["num_fewshot"])]
        if data_dir:
            command += ["--data-dir", data_dir]
        now = time.time()
        deadline = now + self._allowed_seconds(connection, quote.hourly_rate)
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
                "under": shlex.join(supervisor) + " --audit ID --deadline " + f"{deadline:.3f}",
            },
        )
        supervisor += ["--audit", str(audit_id), "--deadline", f"{deadline:.3f}", "--", *command]
        with self.store.connection:
            self.store.connection.execute(
                f"INSERT INTO agent_jobs ({COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, 'running', NULL, NULL, "
                "?, NULL, ?, ?, ?, ?)",
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
                    now,
                    deadline,
                    work,
                    loads,
                    audit_id,
                ),
            )
        ledger.open_item(
            self.store,
            job_id,
            kind="job",
            connection=connection,
            target=quote.target,
            hourly_rate=quote.hourly_rate,
        )
        env = dict(os.environ)
        secret_values = self.secrets.environment()
        env.update(secret_values)
        env[REDACT_ENV] = ",".join(sorted(secret_values))
        log_path.write_bytes(f"$ {self.secrets.redact(shlex.join(command))}\n".encode())
        try:
            child = subprocess.Popen(
                supervisor,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=open(log_path, "ab"),  # noqa: SIM115 - the child keeps it
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._finish(job_id, "failed", f"could not start: {exc.strerror}", None)
            self.store.audit_end(audit_id, None, 0)
            raise JobError(f"job {job_id}: could not start the sweep: {exc.strerror}") from None
        self._children[child.pid] = child
        with self.store.connection:
            self.store.connection.execute(
                "UPDATE agent_jobs SET pid = ?, pid_start = ? WHERE job_id = ?",
                (child.pid, _start_time(child.pid), job_id),
            )
        return job_id

    def _allowed_seconds(self, connection: str, rate: float) -> float:
        """The job's own deadline: max_job_hours, or the budget left if it ran alone."""
        seconds = self.settings.max_job_hours * 3600.0
        if rate > 0:
            since = time.time() - self.settings.global_window_days * 86400
            left = min(
                self.settings.per_connection_usd - ledger.spent(self.store, connection=connection),
                self.settings.global_usd - ledger.spent(self.store, since=since),
            )
            seconds = min(seconds, max(left, 0.0) / rate * 3600.0)
        return seconds

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
                log = Path(job["log_path"])
                ended = log.stat().st_mtime if log.exists() else time.time()
                self._finish(job_id, "lost", "its supervising process disappeared", ended)
                job = self.row(job_id)
        if job["status"] != "running" and job["audit_id"]:
            self._close_audit(job)
        return job

    def _close_audit(self, job: dict[str, Any]) -> None:
        """End the command's audit entry when its supervisor died before it could."""
        open_entry = self.store.connection.execute(
            "SELECT 1 FROM audit WHERE id = ? AND ended IS NULL", (job["audit_id"],)
        ).fetchone()
        if open_entry and not self._alive(job["pid"], job["pid_start"]):
            self.store.audit_end(job["audit_id"], job["exit_code"], _size(Path(job["log_path"])))

    def status(self, job_id: str) -> dict[str, Any]:
        job = self.refresh(job_id)
        done, total = progress(self.store, job["plan"])
        end = job["ended"] or time.time()
        rate = self.store.connection.execute(
            "SELECT hourly_rate FROM agent_ledger WHERE item = ?", (job_id,)
        ).fetchone()
        spend = self.store.connection.execute(
            "SELECT hourly_rate * (MAX(COALESCE(ended, ?), started) - started) / 3600.0 "
            "FROM agent_ledger WHERE item = ?",
            (time.time(), job_id),
        ).fetchone()
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
            "documents_done": done,
            "documents_total": total,
            "hourly_rate": float(rate[0]) if rate else 0.0,
            "spend_usd": round(float(spend[0]), 6) if spend else 0.0,
            "last_log_line": self.secrets.redact(_last_line(Path(job["log_path"]))),
            "log_bytes": _size(Path(job["log_path"])),
        }

    def logs(self, job_id: str, offset: int, max_bytes: int) -> tuple[str, int, int]:
        """(text, next offset, log size): at most ``max_bytes`` of the log from ``offset``."""
        job = self.row(job_id)
        path = Path(job["log_path"])
        size = _size(path)
        if offset < 0 or offset > size:
            raise JobError(f"job {job_id}: offset {offset} is outside the log (0..{size})")
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read(max(max_bytes, 0))
        # Stop at a character boundary so a page never splits a UTF-8 sequence.
        cut = len(chunk)
        while cut and cut > len(chunk) - 4:
            try:
                chunk[:cut].decode()
                break
            except UnicodeDecodeError:
                cut -= 1
        text = chunk[:cut].decode(errors="replace")
        return self.secrets.redact(text), offset + cut, size

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
        self._finish(job_id, status, reason, None)
        self.store.audit_event(
            "stop", f"stop job {job_id}: {reason}", target=job["target"], detail={"job": job_id}
        )
        pid, start = job["pid"], job["pid_start"]
        if pid and self._alive(pid, start):
            _signal_group(pid, signal.SIGTERM)
            timer = threading.Timer(KILL_GRACE_S, self._kill_if_alive, (pid, start))
            timer.daemon = True
            timer.start()
        return True

    def _kill_if_alive(self, pid: int, start: str | None) -> None:
        if _same_process(pid, start):
            _signal_group(pid, signal.SIGKILL)

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
            if job["status"] == "running" and time.time() > job["deadline"]:
                self.cancel(job_id, status="stopped", reason="deadline reached")
                messages.append(f"{job_id}: deadline reached")
        ledger.charge(self.store)
        while (over := self._over_limit()) is not None:
            (item, kind, _conn, target, _rate, _started), why = over
            if kind == "job":
                self.cancel(item, status="stopped", reason=why)
            elif stop_machine is not None:
                stop_machine(target, why)
            ledger.close_item(self.store, item)
            messages.append(f"{item}: stopped, {why}")
        return messages

    def _over_limit(self) -> tuple[tuple[str, str, str, str, float, float], str] | None:
        """The newest priced item to stop, when spend would cross a limit before the next tick."""
        s = self.settings
        ahead = 1.5 * s.watchdog_interval_s / 3600.0
        since = time.time() - s.global_window_days * 86400
        priced = [i for i in ledger.open_items(self.store) if i[4] > 0]
        if not priced:
            return None
        projected = ledger.spent(self.store, since=since)
        if projected + ahead * ledger.running_rate(self.store) > s.global_usd:
            return priced[0], f"global spend limit (${s.global_usd:.2f})"
        for item in priced:  # newest first
            conn = item[2]
            projected = ledger.spent(self.store, connection=conn)
            if projected + ahead * ledger.running_rate(self.store, connection=conn) > (
                s.per_connection_usd
            ):
                return item, f"per-connection spend limit (${s.per_connection_usd:.2f})"
        return None


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


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _last_line(path: Path) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as handle:
        handle.seek(max(_size(path) - 4096, 0))
        tail = handle.read().decode(errors="replace").replace("\r", "\n")
    lines = [line for line in tail.split("\n") if line.strip()]
    return lines[-1][-500:] if lines else ""

"""``evalsweep serve``: browse the runs in a results store, each as its HTML report.

A store accumulates runs from many days; opening one as a report should not
need a command line per run. This is a small read-only server on the loopback
interface (never a public one: the store holds prompts and model outputs) built
on the standard library's ``http.server``. Pages are rendered on request from
the stored result documents; flips are rebuilt from the store's per-question
rows, as ``evalsweep flips`` does, and left out when they cannot be.
"""

from __future__ import annotations

import html
import ipaddress
import socket
import threading
from collections import OrderedDict
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from evalsweep.errors import DataError, EvalsweepError, StoreError
from evalsweep.report._html import render_html
from evalsweep.report._markdown import render_markdown
from evalsweep.report._schema import ResultDocument, document_json, parse_document
from evalsweep.report._table import display_names

#: Rendered reports kept in memory; a report embeds plotly.js (~5 MB), so only a few.
CACHED_PAGES = 4


def make_server(store_path: Path | str, host: str = "127.0.0.1", port: int = 8000) -> ReportServer:
    """A server for ``store_path`` bound to a loopback address (``port=0``: any free port)."""
    if not _is_loopback(host):
        raise EvalsweepError(f"evalsweep serve listens on loopback only, not {host!r}")
    path = Path(store_path)
    if not path.is_file():
        raise StoreError(f"no results store at {path}; run 'evalsweep run' first or pass --store")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("_Server", (ReportServer,), {"address_family": family})
    server = server_class((host, port), _Handler)
    server.store_path = path
    return server


def serve(store_path: Path | str, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted, printing the address to open."""
    server = make_server(store_path, host, port)
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"evalsweep: serving {server.store_path} at http://{shown}:{bound_port}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


class ReportServer(ThreadingHTTPServer):
    """Holds the store path and a small cache of rendered pages."""

    daemon_threads = True
    store_path: Path

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pages: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def page(self, key: tuple[str, str], build: Any) -> bytes:
        with self._lock:
            if key in self._pages:
                self._pages.move_to_end(key)
                return self._pages[key]
        body: bytes = build()
        with self._lock:
            self._pages[key] = body
            while len(self._pages) > CACHED_PAGES:
                self._pages.popitem(last=False)
        return body


class _Handler(BaseHTTPRequestHandler):
    server: ReportServer
    server_version = "evalsweep"

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        path = unquote(self.path.split("?", 1)[0])
        try:
            if path == "/":
                self._send(_index(self.server.store_path), "text/html; charset=utf-8")
            elif path.startswith("/runs/"):
                self._run(path[len("/runs/") :])
            else:
                self._error(HTTPStatus.NOT_FOUND, "no such page")
        except StoreError as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except EvalsweepError as exc:
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, str(exc))

    def _run(self, name: str) -> None:
        """``/runs/ID`` is the HTML report; ``ID.md`` the Markdown one, ``ID.json`` the document."""
        store_path = self.server.store_path
        run_id, dot, suffix = name.rpartition(".")
        if not dot or suffix not in ("md", "json"):
            run_id, suffix = name, "html"
        document = _load(store_path, run_id)
        if suffix == "json":
            text = document_json(document) + "\n"
            self._send(text.encode(), "application/json")
        elif suffix == "md":
            text = render_markdown(document, _flips(store_path, document))
            self._send(text.encode(), "text/markdown; charset=utf-8")
        else:
            body = self.server.page(
                (run_id, document.created),
                lambda: render_html(document, _flips(store_path, document)).encode(),
            )
            self._send(body, "text/html; charset=utf-8")

    def _send(self, body: bytes | str, content_type: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: HTTPStatus, message: str) -> None:
        data = f"<!DOCTYPE html><title>{status.value}</title><p>{html.escape(message)}</p>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
        """Quiet: a report server's access log is noise in the terminal that started it."""


def _load(store_path: Path, run_id: str) -> ResultDocument:
    from evalsweep.store import Store

    with Store(store_path) as store:
        text = store.load_run(run_id)
    return parse_document(text, f"run {run_id!r} in {store_path}")


def _flips(store_path: Path, document: ResultDocument) -> dict[str, list[dict[str, Any]]]:
    """Each candidate's flips against the run's baseline, rebuilt from the stored rows."""
    tasks = list(document.settings.tasks)
    baseline = document.baseline
    if baseline is None or not tasks:
        return {}
    from evalsweep.comparison import find_flips
    from evalsweep.engine import stored_sweep
    from evalsweep.store import Store

    references = [entry.reference for entry in document.checkpoints]
    try:
        with Store(store_path) as store:
            result = stored_sweep(store, references, tasks)
        return {
            c: [f.to_dict() for f in find_flips(result, baseline, c)]
            for c in references
            if c != baseline
        }
    except EvalsweepError:
        return {}  # e.g. the checkpoints no longer share stored settings: show the rest


def _index(store_path: Path) -> str:
    from evalsweep.store import Store

    with Store(store_path) as store:
        runs = store.runs()
    rows = []
    for stored_id, text in reversed(runs):
        try:
            document = parse_document(text, f"run {stored_id!r}")
        except DataError as exc:  # one damaged run does not hide the others
            rows.append(
                f"<tr><td>{html.escape(stored_id)}</td><td colspan='6'>unreadable: "
                f"{html.escape(str(exc))}</td></tr>"
            )
            continue
        run_id = document.run_id
        references = [entry.reference for entry in document.checkpoints]
        names = display_names(references)
        verdicts = [c.verdict.value for c in document.comparisons]
        tasks = ", ".join(document.settings.tasks)
        link = f"/runs/{quote(run_id)}"
        rows.append(
            "<tr>"
            f"<td><a href='{html.escape(link)}'>{html.escape(run_id)}</a></td>"
            f"<td>{html.escape(_when(document.created))}</td>"
            f"<td>{html.escape(', '.join(names[r] for r in references))}</td>"
            f"<td>{html.escape(tasks)}</td>"
            f"<td class='r'>{verdicts.count('regression')}</td>"
            f"<td class='g'>{verdicts.count('improvement')}</td>"
            f"<td><a href='{html.escape(link)}.md'>md</a> · "
            f"<a href='{html.escape(link)}.json'>json</a></td></tr>"
        )
    table = (
        "<table><thead><tr><th>run</th><th>created</th><th>checkpoints</th><th>tasks</th>"
        "<th>regressions</th><th>improvements</th><th></th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else "<p>No runs stored yet: <code>evalsweep run</code> records each run here.</p>"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<title>evalsweep runs</title><style>"
        "body{font:14px/1.45 system-ui,sans-serif;margin:24px 32px;color:#1d2430}"
        "table{border-collapse:collapse}th,td{padding:6px 12px;border-bottom:1px solid #e3e7ee;"
        "text-align:left}.r{color:#b71c1c}.g{color:#1b5e20}a{color:#1f5fbf}"
        "</style></head><body>"
        f"<h1>evalsweep runs</h1><p>{html.escape(str(store_path))} · {len(runs)} runs</p>"
        f"{table}</body></html>"
    )


def _when(created: Any) -> str:
    try:
        return datetime.fromisoformat(str(created)).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return str(created or "")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

"""The gate: what must be true before paid work or a lifecycle action starts.

``check_gate`` refuses a missing, expired, used or changed quote and a quote
that needs approval and has none. Approval comes from the person: through the
MCP client's elicitation when the client supports it and the configuration
trusts it, or out of band with ``evalsweep approve QUOTE_ID`` in their own
terminal, where the agent cannot answer for them. Every approval and refusal
is written to the audit log.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from evalsweep.agent._quotes import GateError, Quote, consume, load_quote, mark_approved
from evalsweep.store import Store
from evalsweep.text import MAX_NAME_CHARS, fold, shortened, visible

#: Most characters of a refused call's arguments kept in its audit entry (the count is kept
#: beside them when there were more).
MAX_RECEIVED = 65_536


def refuse(store: Store, quote_id: str | None, target: str | None, message: str) -> GateError:
    """The error to raise for a refusal (``store``: where it will be audited). It is audited
    once, where the refused call came in (:func:`audit_refusal`, called by the MCP server
    for every refused call and by ``evalsweep approve``), never here: one choke point."""
    del store  # audited by the entry point, with the exact text it received
    return GateError(message, quote_id, target)


def audit_refusal(
    store: Store,
    message: str,
    *,
    received: str,
    tool: str,
    quote_id: str | None = None,
    target: str | None = None,
) -> None:
    """Write one refusal to the audit log: the one line the caller was told, the exact text
    received (``received``, as ASCII-escaped JSON or argv), the tool or command, the quote
    and target it was about."""
    detail: dict[str, Any] = {"tool": tool, "received": received[:MAX_RECEIVED]}
    if len(received) > MAX_RECEIVED:
        detail["received_chars"] = len(received)
    if quote_id:
        detail["quote"] = quote_id
    store.audit_event("refusal", message, target=target, detail=detail)


def check_gate(
    store: Store,
    quote_id: str,
    *,
    kind: str,
    current_hash: str | None,
    used_by: str,
) -> Quote:
    """Consume ``quote_id`` for work of ``kind`` whose parameters now hash to ``current_hash``.

    Raises:
        GateError: (audited) when the quote is unknown, of another kind, expired,
            already used, no longer matches the parameters, or lacks an approval.
    """
    try:
        quote = load_quote(store, quote_id)
    except GateError as exc:
        raise refuse(store, quote_id, None, str(exc)) from None
    where = f"{used_by}: quote {quote_id}"
    if quote.kind != kind:
        raise refuse(store, quote_id, quote.target, f"{where} is for {quote.kind}, not {kind}")
    if quote.used is not None:
        raise refuse(store, quote_id, quote.target, f"{where} was already used by {quote.used_by}")
    if time.time() > quote.expires:
        raise refuse(
            store, quote_id, quote.target, f"{where} expired at {_when(quote.expires)}; quote again"
        )
    if current_hash is not None and current_hash != quote.params_hash:
        raise refuse(
            store,
            quote_id,
            quote.target,
            f"{where} does not cover these parameters (changed since the quote); quote again",
        )
    if quote.needs_approval and quote.approved is None:
        raise refuse(
            store,
            quote_id,
            quote.target,
            f"{where} needs the person's approval: ask them to run "
            f"'evalsweep approve {quote_id}' in their terminal, then call {used_by} again",
        )
    if not consume(store, quote_id, used_by):
        raise refuse(store, quote_id, quote.target, f"{where} was already used")
    return quote


def approve_quote(store: Store, quote_id: str, by: str) -> Quote:
    """Record the person's approval of ``quote_id`` (``evalsweep approve`` or elicitation)."""
    try:
        quote = load_quote(store, quote_id)
    except GateError as exc:
        raise refuse(store, quote_id, None, f"approve: {exc}") from None
    if quote.used is not None:
        raise refuse(store, quote_id, quote.target, f"approve: quote {quote_id} was already used")
    if time.time() > quote.expires:
        raise refuse(
            store, quote_id, quote.target, f"approve: quote {quote_id} expired; quote again"
        )
    if quote.approved is None and not mark_approved(store, quote_id, by):
        raise refuse(store, quote_id, quote.target, f"approve: quote {quote_id} changed state")
    store.audit_event(
        "approval",
        f"approved {quote_id} by {by}: {describe_quote(quote)}",
        target=quote.target,
        detail={"quote": quote_id, "params_hash": quote.params_hash, "by": by},
    )
    return load_quote(store, quote_id)


def refusable(store: Store, quote_id: str) -> Quote:
    """The quote a person is about to be asked about; refused (audited) first when it is
    unknown, already used or expired, so nobody approves what cannot run."""
    from evalsweep.agent._inputs import shown

    try:
        quote = load_quote(store, quote_id)
    except GateError:
        raise refuse(
            store, None, None, f"approve: no quote {shown(quote_id, 40)!r} in {store.path}"
        ) from None
    if quote.used is not None:
        raise refuse(
            store, quote_id, quote.target, f"approve: quote {quote_id} was already used"
        )  # fmt: skip
    if time.time() > quote.expires:
        raise refuse(
            store, quote_id, quote.target, f"approve: quote {quote_id} expired; ask for a new one"
        )
    return quote


def approval_text(store: Store, quote: Quote) -> list[str]:
    """What the person approves: the work as resolved, the price, the limits and what is left."""
    from evalsweep.agent._ledger import left, outstanding, spent
    from evalsweep.agent._settings import AgentSettings

    preview: dict[str, Any] = quote.preview
    lines = [describe_quote(quote)]
    run = quote.params.get("run") or {}
    steps = run.get("steps", {})
    for pair in preview.get("identities", []):
        step = steps.get(pair["reference"])
        at = f" (step {step})" if step is not None else ""
        lines.append(
            f"  checkpoint {named(pair['reference'], whole=True)}{at} -> "
            f"{visible(pair['identity'])}"
        )
    for name, why in run.get("left_out", []):
        lines.append(f"  left out of the run: {named(name, whole=True)} ({visible(why)})")
    if quote.kind == "sweep":
        lines.append(
            f"  tasks {', '.join(named(t) for t in quote.params['tasks'])}; limit "
            f"{quote.params.get('limit')}; num_fewshot {quote.params.get('num_fewshot')}; "
            f"device {visible(str(quote.params.get('device')))}"
        )
    lines.append(
        f"  price: ${quote.hourly_rate:.2f}/h on {visible(str(preview.get('hardware', '?')))}, "
        "estimated "
        f"${quote.estimated_cost:.4f}; worst case ${preview.get('max_cost', 0.0):.4f} "
        "(reserved when it starts; the job is stopped there)"
    )
    if quote.hourly_rate > 0 and float(preview.get("max_cost", 0.0)) < quote.estimated_cost:
        lines.append(
            "  note: the worst case is below the estimate (the limits had no room when this "
            "was quoted): starting it will be refused; ask for a new quote"
        )
    settings = AgentSettings.from_config()
    limits = settings.ledger_limits()
    connection = str(preview.get("connection", ""))
    free = left(store, limits, connection) if connection else None
    lines.append(
        f"  limits: ${limits.per_connection_usd:.2f} per connection, ${limits.global_usd:.2f} "
        f"global over {limits.global_window_days:g} days; spent ${spent(store):.4f}, reserved "
        f"${outstanding(store):.4f}"
        + (f", left for this connection ${max(free, 0.0):.4f}" if free is not None else "")
    )
    return lines


def approval_rows(store: Store, quote: Quote, width: int) -> list[str]:
    """:func:`approval_text` as a terminal ``width`` cells wide shows it: every line folded
    (:func:`evalsweep.text.fold`), so the terminal wraps nothing and every row that does not
    begin a line begins with the continuation mark."""
    return [row for line in approval_text(store, quote) for row in fold(line, width)]


def decline_quote(store: Store, quote_id: str, by: str) -> None:
    quote = load_quote(store, quote_id)
    store.audit_event(
        "refusal",
        f"declined {quote_id} by {by}",
        target=quote.target,
        detail={"quote": quote_id, "by": by},
    )


def describe_quote(quote: Quote) -> str:
    """One line for the person: what, where, at what rate, for about how much; every name in
    it through the one renderer (:func:`evalsweep.text.visible`), so the line is the same on
    a terminal, in an MCP client's approval question and in the audit log."""
    preview: dict[str, Any] = quote.preview
    if quote.kind == "sweep":
        what = (
            f"sweep of {_checkpoints(quote.params)} on "
            f"{', '.join(named(t) for t in quote.params['tasks'])}"
            + (f" (limit {quote.params['limit']})" if quote.params.get("limit") else "")
        )
        time_text = f"about {_duration(preview.get('estimated_seconds', 0))}"
    else:
        what = f"{visible(quote.params['action'])} of target {named(quote.target)}"
        time_text = visible(str(preview.get("effect", "")))
    return (
        f"{what} on {named(quote.target)} ({visible(str(preview.get('hardware', '?')))}) at "
        f"${quote.hourly_rate:.2f}/h, {time_text}, estimated ${quote.estimated_cost:.2f}, "
        f"at most ${preview.get('max_cost', quote.estimated_cost):.4f}"
    )


def _checkpoints(params: dict[str, Any]) -> str:
    """The checkpoints a sweep covers, in words; a run's as the run, its selection and its
    checkpoints in the order they run, said to be step order only when it is (every name
    through :func:`named`)."""
    from evalsweep.runs import in_step_order

    run = params.get("run")
    listed = ", ".join(named(c) for c in params["checkpoints"])
    if not run:
        return listed
    chosen = [f"{name} {visible(str(value))}" for name, value in run["selection"].items()
              if value is not None]  # fmt: skip
    order = "step order" if in_step_order(params["checkpoints"], run["steps"]) else "this order"
    return (
        f"run {', '.join(named(r) for r in run['references'])}"
        + (f" ({', '.join(chosen)})" if chosen else "")
        + f": {len(params['checkpoints'])} checkpoints in {order}, {listed}"
    )


def named(value: str, *, whole: bool = False) -> str:
    """A name as a person approves it: through the one renderer, and where it holds
    anything but ASCII, followed by its ASCII-escaped form, so a look-alike letter (a
    Cyrillic 'а' in 'tiny-а') cannot pass for the name it imitates. Unless ``whole`` (a
    line of ``evalsweep approve``, folded to the terminal), a long name is shortened with
    its elision and length said: the one-line summary and question are shown at widths
    nobody here knows."""
    limit = len(value) if whole else MAX_NAME_CHARS
    shown = shortened(value, limit)
    return shown if value.isascii() else f"{shown} [{shortened(value, limit, ascii)}]"


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def iso(stamp: float | None) -> str | None:
    return None if stamp is None else _when(stamp)

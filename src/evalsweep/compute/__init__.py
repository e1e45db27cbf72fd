"""Where the work runs: this machine, an SSH host, a cloud GPU, a Ray cluster.

A :class:`Target` says what it is and what it costs per hour (``info``) and
runs a sweep (``run``), bringing its rows into the local store so results,
``compare``, ``flips`` and ``report`` are the same wherever it ran. ``local``
(this machine, free) always exists; others come from the ``[targets.NAME]``
tables of the person's configuration or from a URL (``ssh://``, ``ray://``).
Every command sent to a target goes through the audited
:class:`CommandRunner`, and every target reports its spend as it accrues
(:class:`SpendMeter`).

The names below load their modules on first use: a worker that judges code-eval
slices (``code-eval-slice``) imports only the modules it runs, not the sweep
engine, tasks and statistics that targets use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalsweep.compute._base import (
        LifecycleTarget,
        LocalTarget,
        SweepJob,
        Target,
        TargetInfo,
        TargetRun,
    )
    from evalsweep.compute._catalog import Offer, Quote, load_offers, quote
    from evalsweep.compute._cost import SpendMeter
    from evalsweep.compute._execute import run_on_target
    from evalsweep.compute._ray import RayTarget
    from evalsweep.compute._registry import get_target, load_targets, make_target
    from evalsweep.compute._runner import AuditedCall, CommandResult, CommandRunner
    from evalsweep.compute._skypilot import SkyPilotTarget
    from evalsweep.compute._ssh import SSHTarget
    from evalsweep.compute._stream import LineProgress
    from evalsweep.compute._transfer import (
        MANIFEST,
        MAX_PIECE_BYTES,
        Piece,
        PieceError,
        export_pieces,
        import_piece,
        pieces_to_import,
        read_piece,
    )

#: Each public name and the module that defines it (``__all__`` and the imports above
#: for type checkers name the same; tests/test_evalsweep_imports.py holds them equal).
_EXPORTS = {
    "LifecycleTarget": "evalsweep.compute._base",
    "LocalTarget": "evalsweep.compute._base",
    "SweepJob": "evalsweep.compute._base",
    "Target": "evalsweep.compute._base",
    "TargetInfo": "evalsweep.compute._base",
    "TargetRun": "evalsweep.compute._base",
    "Offer": "evalsweep.compute._catalog",
    "Quote": "evalsweep.compute._catalog",
    "load_offers": "evalsweep.compute._catalog",
    "quote": "evalsweep.compute._catalog",
    "SpendMeter": "evalsweep.compute._cost",
    "run_on_target": "evalsweep.compute._execute",
    "RayTarget": "evalsweep.compute._ray",
    "get_target": "evalsweep.compute._registry",
    "load_targets": "evalsweep.compute._registry",
    "make_target": "evalsweep.compute._registry",
    "AuditedCall": "evalsweep.compute._runner",
    "CommandResult": "evalsweep.compute._runner",
    "CommandRunner": "evalsweep.compute._runner",
    "SkyPilotTarget": "evalsweep.compute._skypilot",
    "SSHTarget": "evalsweep.compute._ssh",
    "LineProgress": "evalsweep.compute._stream",
    "MANIFEST": "evalsweep.compute._transfer",
    "MAX_PIECE_BYTES": "evalsweep.compute._transfer",
    "Piece": "evalsweep.compute._transfer",
    "PieceError": "evalsweep.compute._transfer",
    "export_pieces": "evalsweep.compute._transfer",
    "import_piece": "evalsweep.compute._transfer",
    "pieces_to_import": "evalsweep.compute._transfer",
    "read_piece": "evalsweep.compute._transfer",
}

__all__ = [
    "AuditedCall",
    "CommandResult",
    "CommandRunner",
    "LifecycleTarget",
    "LineProgress",
    "LocalTarget",
    "MANIFEST",
    "MAX_PIECE_BYTES",
    "Offer",
    "Piece",
    "PieceError",
    "Quote",
    "RayTarget",
    "SSHTarget",
    "SkyPilotTarget",
    "SpendMeter",
    "SweepJob",
    "Target",
    "TargetInfo",
    "TargetRun",
    "export_pieces",
    "get_target",
    "import_piece",
    "load_offers",
    "load_targets",
    "make_target",
    "pieces_to_import",
    "quote",
    "read_piece",
    "run_on_target",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

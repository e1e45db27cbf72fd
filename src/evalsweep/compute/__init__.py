"""Where the work runs: this machine, an SSH host, a cloud GPU, a Ray cluster.

A :class:`Target` says what it is and what it costs per hour (``info``) and
runs a sweep (``run``), bringing its rows into the local store so results,
``compare``, ``flips`` and ``report`` are the same wherever it ran. ``local``
(this machine, free) always exists; others come from the ``[targets.NAME]``
tables of the person's configuration or from a URL (``ssh://``, ``ray://``).
Every command sent to a target goes through the audited
:class:`CommandRunner`, and every target reports its spend as it accrues
(:class:`SpendMeter`).
"""

from evalsweep.compute._base import (
    LifecycleTarget,
    LocalTarget,
    SweepJob,
    Target,
    TargetInfo,
    TargetRun,
)
from evalsweep.compute._catalog import Offer, Quote, load_offers, quote
from evalsweep.compute._code_eval_run import CodeEvalRun, code_eval
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

__all__ = [
    "MANIFEST",
    "MAX_PIECE_BYTES",
    "AuditedCall",
    "CodeEvalRun",
    "CommandResult",
    "CommandRunner",
    "LifecycleTarget",
    "LineProgress",
    "LocalTarget",
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
    "code_eval",
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

"""A cloud GPU provisioned for the sweep with SkyPilot, and torn down after it.

The target quotes from the shipped catalog snapshot (H100 by default), then
launches exactly the quoted resources with ``max_hourly_cost`` set to the
quoted price, autostop and teardown set at launch, and its own deadline
watchdog besides (provider-side timers have been seen to fail). After
provisioning it reads the price SkyPilot reports for what it launched and
tears the cluster down if that differs from the quote. The sweep itself runs
over ssh (SkyPilot makes the cluster an ssh host), so it streams and comes
back exactly as on an :class:`SSHTarget`. ``stop``, ``start`` and
``terminate`` map to ``sky.stop``, ``sky.start`` and ``sky.down``; every call
goes through the audited command runner.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evalsweep import __version__
from evalsweep._atomic import atomic_write
from evalsweep.compute._base import SweepJob, TargetInfo, TargetRun
from evalsweep.compute._catalog import DEFAULT_GPU, Quote, latest_snapshot, load_offers, quote
from evalsweep.compute._cost import SpendMeter
from evalsweep.compute._runner import CommandRunner
from evalsweep.compute._ssh import SSHTarget
from evalsweep.engine import Progress
from evalsweep.errors import TargetError
from evalsweep.store import Store

#: Clouds whose catalog rows SkyPilot 0.14 can launch by instance type.
SKYPILOT_CLOUDS = {
    "aws": "AWS", "gcp": "GCP", "azure": "Azure", "lambda": "Lambda", "runpod": "RunPod",
    "nebius": "Nebius", "oci": "OCI", "vast": "Vast", "cudo": "Cudo",
}  # fmt: skip

#: Minimum billed seconds per provider (others bill per second from the start).
MINIMUM_SECONDS = {"aws": 60, "gcp": 60, "azure": 60}


@dataclass
class SkyPilotTarget:
    """A cloud GPU by name: ``gpu`` x ``count`` from the cheapest quoted offer.

    Args:
        name: the target's name.
        gpu: accelerator name as the catalog spells it (H100, H200, B200, A100-80GB, L40S...).
        count: GPUs on the machine.
        cluster: SkyPilot cluster name.
        idle_minutes: autostop after this many idle minutes (set at launch).
        down: tear the cluster down (not just stop it) at autostop and after the sweep.
        deadline_minutes: our own watchdog: terminate after this long whatever happens.
        price_tolerance: relative difference between quoted and provisioned price allowed.
        python, setup, env: as for :class:`SSHTarget`, on the cluster.
        store: the results store whose audit log records lifecycle calls.
    """

    name: str
    gpu: str = DEFAULT_GPU
    count: int = 1
    cluster: str = "evalsweep"
    idle_minutes: int = 10
    down: bool = True
    deadline_minutes: float = 240.0
    price_tolerance: float = 0.0
    python: str = "python3"
    setup: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    store: Store | None = None
    kind: str = "skypilot"
    _quote: Quote | None = field(default=None, init=False, repr=False)
    _watchdog: threading.Timer | None = field(default=None, init=False, repr=False)
    _meter: SpendMeter | None = field(default=None, init=False, repr=False)
    #: Whether SkyPilot's local API server was already running before this target used it
    #: (None until it does): ``close`` stops it only when this process started it.
    _api_before: bool | None = field(default=None, init=False, repr=False)

    # -- price ------------------------------------------------------------------------------

    def quote(self) -> Quote:
        """The catalog snapshot's cheapest offer (raises for an unknown GPU type)."""
        if self._quote is None:
            self._quote = quote(self.gpu, self.count)
        return self._quote

    def info(self) -> TargetInfo:
        offer = self.quote()
        return TargetInfo(
            name=self.name,
            kind=self.kind,
            hardware=f"{offer.count} x {offer.gpu}",
            hourly_rate=offer.hourly_price,
            lifecycle=True,
            details={
                "quote": offer.as_dict(),
                "cluster": self.cluster,
                "idle_minutes": self.idle_minutes,
                "down": self.down,
                "deadline_minutes": self.deadline_minutes,
            },
        )

    def resources(self) -> Any:
        """``sky.Resources`` for the quote: its accelerators, at most its price."""
        sky = _sky(self.name)

        offer = self.quote()
        seed_skypilot_catalog()
        kwargs: dict[str, Any] = {
            "accelerators": f"{offer.gpu}:{offer.count}",
            "max_hourly_cost": round(offer.hourly_price * (1 + self.price_tolerance), 4),
        }
        if offer.offer.cloud in SKYPILOT_CLOUDS:
            kwargs["infra"] = offer.offer.cloud
            kwargs["instance_type"] = offer.offer.instance_type
        return sky.Resources(**kwargs)

    # -- lifecycle --------------------------------------------------------------------------

    def _runner(self) -> CommandRunner:
        if self.store is None:
            raise TargetError(f"skypilot target {self.name}: no results store to audit into")
        return CommandRunner(self.store, self.name)

    def setup_command(self) -> str:
        return self.setup or f"{self.python} -m pip install -q evalsweep=={__version__}"

    def deploy(self, *, dryrun: bool = False) -> dict[str, Any]:
        """Launch the quoted resources with autostop/teardown set; start the watchdog.

        Returns:
            What was asked for and, after a real launch, the provisioned price.
        """
        sky = _sky(self.name)
        offer = self.quote()
        runner = self._runner()
        text = (
            f"sky.launch(cluster_name={self.cluster!r}, accelerators="
            f"'{offer.gpu}:{offer.count}', max_hourly_cost={offer.hourly_price}, "
            f"idle_minutes_to_autostop={self.idle_minutes}, down={self.down}, dryrun={dryrun})"
        )
        launched: dict[str, Any] = {"quote": offer.as_dict(), "dryrun": dryrun}
        seeded = seed_skypilot_catalog(names=True) if dryrun else []
        try:
            with self._sky_errors("launch"), runner.call("launch", text, detail=launched):
                task = sky.Task(name="evalsweep", setup=self.setup_command())
                task.set_resources(self.resources())
                request = sky.launch(
                    task,
                    cluster_name=self.cluster,
                    idle_minutes_to_autostop=self.idle_minutes,
                    down=self.down,
                    dryrun=dryrun,
                )
                _, handle = sky.stream_and_get(request)
        finally:
            for path in seeded:
                if path.name == "accelerators.csv":
                    path.unlink(missing_ok=True)
        if dryrun:
            return launched
        self._meter = SpendMeter(
            offer.hourly_price, MINIMUM_SECONDS.get(offer.offer.cloud, 0), "USD"
        )
        self._meter.start()
        self.start_watchdog()
        provisioned = _provisioned_price(handle)
        launched["provisioned_hourly_price"] = provisioned
        allowed = offer.hourly_price * (1 + self.price_tolerance) + 1e-9
        if provisioned is not None and not (
            offer.hourly_price * (1 - self.price_tolerance) - 1e-9 <= provisioned <= allowed
        ):
            self.terminate()
            raise TargetError(
                f"skypilot target {self.name}: provisioned at {provisioned:.2f}/h, quoted "
                f"{offer.hourly_price:.2f}/h ({offer.catalog}); cluster torn down"
            )
        return launched

    def stop(self) -> None:
        self._lifecycle("stop", f"sky.stop({self.cluster!r})")

    def start(self) -> None:
        self._lifecycle(
            "start",
            f"sky.start({self.cluster!r}, idle_minutes_to_autostop={self.idle_minutes}, "
            f"down={self.down})",
        )

    def terminate(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._lifecycle("terminate", f"sky.down({self.cluster!r})")
        if self._meter is not None:
            self._meter.stop()

    def _lifecycle(self, action: str, text: str) -> None:
        sky = _sky(self.name)

        calls = {
            "stop": lambda: sky.stop(self.cluster),
            "start": lambda: sky.start(
                self.cluster, idle_minutes_to_autostop=self.idle_minutes, down=self.down
            ),
            "terminate": lambda: sky.down(self.cluster),
        }
        with self._sky_errors(action), self._runner().call(action, text):
            sky.stream_and_get(calls[action]())

    def _sky_errors(self, action: str) -> Any:
        if self._api_before is None:
            self._api_before = _local_api_running()
        return _SkyErrors(self.name, self.cluster, action)

    def close(self) -> None:
        """Stop what this target's SkyPilot calls started: the local API server, when it
        was not running before (a server someone else runs is left alone)."""
        if self._api_before is not False or not _local_api_running():
            return
        sky = _sky(self.name)
        text = "sky.api_stop()"
        with contextlib.suppress(Exception), self._sky_errors("api_stop"):
            if self.store is not None:
                with self._runner().call("api_stop", text):
                    sky.api_stop()
            else:
                sky.api_stop()
        self._api_before = None

    def start_watchdog(self) -> None:
        """Terminate at the deadline even if SkyPilot's own autostop never fires."""
        if self.deadline_minutes <= 0:
            return
        store_path = self.store.path if self.store is not None else None

        def expire() -> None:
            if store_path is None:
                return
            with Store(store_path) as own_store:  # a thread needs its own connection
                own = SkyPilotTarget(
                    name=self.name, cluster=self.cluster, gpu=self.gpu, count=self.count,
                    store=own_store,
                )  # fmt: skip
                own_store.audit_event(
                    "deadline", f"deadline of {self.deadline_minutes} min reached",
                    target=self.name,
                )  # fmt: skip
                with contextlib.suppress(TargetError):
                    own.terminate()

        self._watchdog = threading.Timer(self.deadline_minutes * 60, expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    # -- the sweep --------------------------------------------------------------------------

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        self.store = store
        progress.note(
            f"{self.name}: launching {self.count} x {self.gpu} "
            f"(quoted {self.quote().hourly_price:.2f}/h, {self.quote().catalog})"
        )
        launched = self.deploy()
        shell = SSHTarget(
            name=self.name, host=self.cluster, python=self.python, setup=self.setup_command(),
            env=self.env, hourly_rate=0.0,
        )  # fmt: skip
        try:
            ran = shell.run(job, store, progress)
        finally:
            if self.down:
                self.terminate()
        meter = self._meter or SpendMeter(self.quote().hourly_price)
        meter.stop()
        ran.compute = {
            **self.info().as_dict(),
            "launched": launched,
            "setup": ran.compute.get("setup"),
            "spend": meter.as_dict(),
        }
        return ran


def _local_api_running() -> bool:
    """Whether a SkyPilot API server runs on this machine (False without SkyPilot)."""
    try:
        from sky.server import common
    except ImportError:
        return False
    try:
        if not common.is_api_server_local():
            return False
        return bool(common.get_api_server_status().status.value == "healthy")
    except Exception:  # SkyPilot's own errors: treat as not running
        return False


def _sky(name: str) -> Any:
    try:
        import sky
    except ImportError:
        raise TargetError(
            f"skypilot target {name} needs SkyPilot: pip install 'evalsweep[compute]'"
        ) from None
    return sky


class _SkyErrors:
    """Turn SkyPilot's exceptions into one line naming the target, cluster and action."""

    def __init__(self, name: str, cluster: str, action: str) -> None:
        self.name, self.cluster, self.action = name, cluster, action

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or isinstance(exc, TargetError) or not isinstance(exc, Exception):
            return False
        lines = [line.strip() for line in str(exc).split("\n") if line.strip()]
        detail = lines[0] if lines else type(exc).__name__
        raise TargetError(
            f"skypilot target {self.name}: {self.action} of cluster {self.cluster!r} failed: "
            f"{type(exc).__name__}: {_plain(detail)}"
        ) from None


def seed_skypilot_catalog(snapshot: Path | None = None, names: bool = False) -> list[Path]:
    """Give SkyPilot our snapshot for clouds whose catalog it has never downloaded.

    SkyPilot downloads its catalog from the network when it first needs a cloud's
    prices; offline (a preview, a dry run) it would fail. A file already there is
    never touched. The copies are dated as the snapshot, so SkyPilot replaces them
    with its own catalog at its next refresh when online.

    Args:
        snapshot: the dated snapshot folder (default: the latest shipped).
        names: also write SkyPilot's list of accelerator names, for an offline dry
            run. SkyPilot never refreshes that file, so the caller removes it after.

    Returns:
        The files written.
    """
    from datetime import datetime

    from sky.catalog import common

    snapshot = snapshot or latest_snapshot()
    stamp = datetime.strptime(snapshot.name, "%Y-%m-%d").timestamp()
    written = []
    for source in sorted(snapshot.glob("*/vms.csv")):
        cloud = source.parent.name
        if cloud not in SKYPILOT_CLOUDS:
            continue
        destination = Path(common.get_catalog_path(f"{cloud}/vms.csv"))
        if destination.exists():
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:  # only where nothing is, whole: SkyPilot may be reading its catalog meanwhile
            atomic_write(destination, source.read_bytes(), mode=0o666, exclusive=True)
        except FileExistsError:
            continue
        os.utime(destination, (stamp, stamp))
        written.append(destination)
    # Which accelerator names exist, and where: SkyPilot canonicalises names with it.
    listing = Path(common.get_catalog_path("common/accelerators.csv"))
    if names and not listing.exists():
        clouds: dict[str, set[str]] = {}
        for offer in load_offers(snapshot):
            if offer.cloud in SKYPILOT_CLOUDS:
                clouds.setdefault(offer.accelerator, set()).add(SKYPILOT_CLOUDS[offer.cloud])
        listing.parent.mkdir(parents=True, exist_ok=True)
        rows = io.StringIO(newline="")
        writer = csv.writer(rows)
        writer.writerow(["AcceleratorName", "Clouds"])
        for name, where in sorted(clouds.items()):
            writer.writerow([name, ", ".join(sorted(where))])
        with contextlib.suppress(FileExistsError):  # written meanwhile: theirs stays
            atomic_write(listing, rows.getvalue(), mode=0o666, exclusive=True)
            written.append(listing)
    return written


def _plain(text: str) -> str:
    """SkyPilot colours its messages; a one-line error should not carry escape codes."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)[:400]


def _provisioned_price(handle: Any) -> float | None:
    resources = getattr(handle, "launched_resources", None)
    nodes = getattr(handle, "launched_nodes", 1) or 1
    if resources is None:
        return None
    try:
        return float(resources.get_cost(3600)) * nodes
    except (AttributeError, ValueError, TypeError):
        return None

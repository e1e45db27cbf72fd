"""The SkyPilot target: quotes from the shipped catalog snapshot, and the launch path
as far as it goes without a cloud account (SkyPilot's own dry run), lifecycle included.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli
from evalsweep.compute import SkyPilotTarget, get_target, load_offers, quote
from evalsweep.compute._catalog import latest_snapshot
from evalsweep.errors import TargetError
from evalsweep.store import Store

pytestmark = pytest.mark.integration

#: The columns of SkyPilot's ``vms.csv`` catalogs that evalsweep and SkyPilot read.
SKYPILOT_COLUMNS = {
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price",
    "SpotPrice", "Region", "GpuInfo",
}  # fmt: skip


def _cheapest(gpu: str, count: int) -> float:
    prices = []
    for path in latest_snapshot().glob("*/vms.csv"):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["AcceleratorName"] == gpu and float(row["AcceleratorCount"]) == count:
                    prices.append(float(row["Price"]))
    return min(prices)


def test_snapshot_is_dated_and_in_skypilots_schema() -> None:
    snapshot = latest_snapshot()
    assert snapshot.name[:4].isdigit() and (snapshot / "SOURCE.md").is_file()
    files = list(snapshot.glob("*/vms.csv"))
    assert files
    for path in files:
        with path.open(newline="") as handle:
            assert set(next(csv.reader(handle))) == SKYPILOT_COLUMNS


def test_snapshot_rows_are_usable_by_skypilots_own_catalog_code() -> None:
    import pandas as pd
    from sky.catalog import common

    frame = pd.read_csv(latest_snapshot() / "lambda" / "vms.csv")
    types, _ = common.get_instance_type_for_accelerator_impl(frame, "H100", 1)
    assert types and quote("H100").offer.instance_type in types


@pytest.mark.parametrize("gpu", ["H100", "H200", "B200", "A100-80GB", "L40S"])
def test_quote_is_the_cheapest_offer_of_the_snapshot(gpu: str) -> None:
    found = quote(gpu)
    assert found.gpu == gpu and found.count == 1
    assert found.hourly_price == _cheapest(gpu, 1)
    assert found.catalog == latest_snapshot().name


def test_default_gpu_is_h100_and_counts_are_honoured() -> None:
    assert SkyPilotTarget(name="cloud").info().hardware == "1 x H100"
    eight = quote("H200", 8)
    assert eight.count == 8 and eight.hourly_price == _cheapest("H200", 8)
    assert eight.hourly_price > quote("H200").hourly_price


def test_missing_gpu_type_is_one_clear_error() -> None:
    with pytest.raises(TargetError) as raised:
        quote("X900")
    message = str(raised.value)
    assert "'X900'" in message and "H100" in message and "\n" not in message
    with pytest.raises(TargetError, match="no offer of 3 x H100"):
        quote("H100", 3)


def test_targets_and_quote_commands(tmp_path: Path, cli_env: dict[str, str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[targets.cloud]\nkind = "skypilot"\ngpu = "B200"\n\n'
        '[targets.box]\nkind = "ssh"\nhost = "me@gpu1"\nhourly_rate = 1.5\nhardware = "1 x A100"\n'
    )
    env = {**cli_env, "EVALSWEEP_CONFIG": str(config)}
    listed = run_cli(
        ["targets", "--json"],
        env=env, check=True,
    )  # fmt: skip
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["local"]["hourly_rate"] == 0 and rows["box"]["hourly_rate"] == 1.5
    assert rows["cloud"]["hourly_rate"] == quote("B200").hourly_price
    assert rows["cloud"]["lifecycle"] is True and rows["box"]["lifecycle"] is False
    priced = run_cli(
        ["quote", "H200", "--count", "2", "--json"],
        env=env, check=True,
    )  # fmt: skip
    assert json.loads(priced.stdout)["hourly_price"] == _cheapest("H200", 2)
    missing = run_cli(
        ["quote", "Z1"],
        env=env, )  # fmt: skip
    assert missing.returncode == 2 and "'Z1'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_target_urls_and_configuration_errors(tmp_path: Path) -> None:
    assert get_target("skypilot:L40S", config={}).info().hardware == "1 x L40S"
    assert get_target("ssh://me@gpu1:2222", config={}).info().details["port"] == 2222
    with pytest.raises(TargetError, match="no target 'nope'"):
        get_target("nope", config={})
    from evalsweep.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown setting"):
        get_target("x", config={"targets": {"x": {"kind": "ssh", "host": "h", "colour": 1}}})
    with pytest.raises(ConfigError, match="kind must be one of"):
        get_target("x", config={"targets": {"x": {"kind": "slurm"}}})


@pytest.fixture
def skypilot_api() -> Iterator[None]:
    """SkyPilot's client starts a local API server on first use; stop it afterwards."""
    import sky

    try:
        yield
    finally:
        sky.api_stop()


@pytest.mark.slow
def test_launch_dry_run_and_lifecycle_go_as_far_as_no_cloud_account_allows(
    skypilot_api: None, store_path: Path
) -> None:
    with Store(store_path) as store:
        target = SkyPilotTarget(
            name="cloud", cluster="evalsweep-test-dryrun", idle_minutes=7, store=store
        )
        resources = target.resources()
        # The launch asks exactly for the quote: accelerators, instance, price ceiling.
        offer = target.quote()
        assert resources.accelerators == {"H100": 1}
        assert resources.max_hourly_cost == offer.hourly_price
        assert resources.instance_type == offer.offer.instance_type
        try:
            launched = target.deploy(dryrun=True)
        except TargetError as exc:  # no cloud account here: SkyPilot's optimizer stops
            message = str(exc)
            assert message.startswith("skypilot target cloud: launch of cluster")
            assert "\n" not in message and "\x1b" not in message
        else:  # a machine with cloud credentials: SkyPilot's dry run succeeds
            assert launched["dryrun"] is True
        for action in (target.stop, target.start, target.terminate):
            with pytest.raises(TargetError, match="does not exist"):
                action()
        # Our own deadline watchdog tears the cluster down even if autostop never fires.
        target.deadline_minutes = 0.002
        target.start_watchdog()
        assert target._watchdog is not None
        target._watchdog.join(timeout=300)
        entries = store.audit_entries(target="cloud")
    kinds = [e["kind"] for e in entries]
    assert kinds == ["launch", "stop", "start", "terminate", "deadline", "terminate"]
    launch = entries[0]["text"]
    assert "accelerators='H100:1'" in launch and f"max_hourly_cost={offer.hourly_price}" in launch
    assert "idle_minutes_to_autostop=7" in launch and "down=True" in launch
    assert "dryrun=True" in launch
    assert entries[1]["text"] == "sky.stop('evalsweep-test-dryrun')"
    assert entries[3]["text"] == "sky.down('evalsweep-test-dryrun')"
    assert all(e["ended"] is not None for e in entries)


def test_offers_cover_the_gpus_people_ask_for() -> None:
    names = {offer.accelerator for offer in load_offers()}
    assert {"H100", "H200", "B200", "A100-80GB", "L40S"} <= names


def test_seeding_skypilots_catalog_writes_whole_files_only_where_none_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sky.catalog import common

    from evalsweep.compute._skypilot import seed_skypilot_catalog

    monkeypatch.setattr(common, "_ABSOLUTE_VERSIONED_CATALOG_DIR", str(tmp_path / "catalogs"))
    sources = sorted(latest_snapshot().glob("*/vms.csv"))
    first = tmp_path / "catalogs" / sources[0].parent.name / "vms.csv"
    first.parent.mkdir(parents=True)
    first.symlink_to(tmp_path / "victim")  # something there already: never written through
    written = seed_skypilot_catalog(names=True)
    assert not (tmp_path / "victim").exists() and first.is_symlink()
    assert first not in written and (tmp_path / "catalogs/common/accelerators.csv") in written
    for path in written:
        if path.name == "vms.csv":
            assert (
                path.read_bytes() == (latest_snapshot() / path.parent.name / "vms.csv").read_bytes()
            )
    listing = (tmp_path / "catalogs/common/accelerators.csv").read_bytes()
    assert listing.startswith(b"AcceleratorName,Clouds\r\n")
    assert seed_skypilot_catalog(names=True) == []  # already there: untouched
    hidden = [p for p in (tmp_path / "catalogs").rglob(".*")]
    assert hidden == []

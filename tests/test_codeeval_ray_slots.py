"""How many code-eval slices a Ray cluster gets at once: what its nodes can start, no more.

A real multi-node cluster on this machine (``ray.cluster_utils.Cluster``: a head
with no CPUs, as a scheduling-only head is started, and worker nodes of
different sizes, each a raylet of its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    made.add_node(num_cpus=1)
    made.add_node(num_cpus=3)
    made.wait_for_nodes(timeout=300)
    ray.init(address=made.address, log_to_driver=False)
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


@pytest.mark.parametrize(
    ("num_cpus", "per_host", "expected"),
    [
        (1, 2, 3),  # node of 1 CPU: 1; node of 3: 2 (per host); the head: none
        (1, 1, 2),
        (1, 8, 4),  # every CPU, not 8 per alive node (24)
        (2, 2, 1),  # only the 3-CPU node fits a 2-CPU slice
        (0.5, 8, 8),
        (0, 2, 6),  # a slice asking no CPU: per host on each of the 3 alive nodes
    ],
)
def test_slices_in_flight_are_what_the_nodes_can_start(
    cluster: Any, tmp_path: Any, num_cpus: float, per_host: int, expected: int
) -> None:
    from evalsweep.codeeval._transports import RaySlices
    from evalsweep.compute._ray import RayTarget
    from evalsweep.compute._runner import CommandRunner
    from evalsweep.store import Store

    with Store(tmp_path / "s.sqlite") as store:
        target = RayTarget(name="cluster", address=cluster.address, num_cpus=num_cpus)
        slices = RaySlices(target, CommandRunner(store, "cluster"), slices_per_host=per_host)
        setup = slices.prepare(lambda message: None)
    assert slices.slots() == setup["slices_at_once"] == expected
    assert setup["nodes"] == 3

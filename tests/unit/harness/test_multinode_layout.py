"""The multi-node layout's pure parts: names and addresses per cluster and node, the host's
forwarding guard, the cluster-index leases."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import nodemount, nodenet


@pytest.mark.parametrize(
    ("cluster", "index", "expected"),
    [
        pytest.param(0, 1, ("na-m0-n1", "na-m0n1", "198.18.16.11", "198.18.16.1"), id="make up"),
        pytest.param(7, 3, ("na-m7-n3", "na-m7n3", "198.18.23.13", "198.18.23.1"), id="a test"),
        pytest.param(
            199,
            80,
            ("na-m199-n80", "na-m199n80", "198.18.215.90", "198.18.215.1"),
            id="the last node of the last cluster",
        ),
    ],
)
def test_node_names_and_addresses(
    cluster: int, index: int, expected: tuple[str, str, str, str]
) -> None:
    addr = nodenet.NodeAddr(cluster, index)
    assert (addr.netns, addr.host_dev, addr.ip, addr.gateway) == expected
    assert len(addr.host_dev) <= 15  # IFNAMSIZ


def test_every_address_is_in_the_benchmarking_range() -> None:
    bench = nodenet.ipaddress.ip_network("198.18.0.0/15")
    for k in (0, nodenet.MAX_CLUSTERS - 1):
        assert nodenet.cluster_subnet(k).subnet_of(bench)
        assert nodenet.cluster_subnet(k).network_address != nodenet.ipaddress.ip_address(
            "198.18.0.0"
        )  # never the apiserver's 198.18.0.1


@pytest.mark.parametrize(
    ("cluster", "index"), [(-1, 1), (nodenet.MAX_CLUSTERS, 1), (0, 0), (0, nodenet.MAX_NODES + 1)]
)
def test_out_of_range_indices_are_refused(cluster: int, index: int) -> None:
    with pytest.raises(ValueError, match="index"):
        nodenet.NodeAddr(cluster, index)


def test_guard_lets_node_links_talk_and_nothing_else_out() -> None:
    rules = nodenet.guard_rules(3)
    assert "table ip na_m3_guard" in rules
    assert 'iifname "na-m3n*" oifname != "na-m3n*" drop' in rules
    assert 'oifname "na-m3n*" iifname != "na-m3n*" drop' in rules
    assert "hook forward" in rules


def test_guard_lets_node_links_and_the_routed_vm_network_reach_each_other_only() -> None:
    lines = [line.strip() for line in nodenet.guard_rules(3).splitlines()]
    to_vm = 'iifname "na-m3n*" oifname "virbr*" ip daddr 198.18.15.0/24 accept'
    from_vm = 'iifname "virbr*" ip saddr 198.18.15.0/24 oifname "na-m*" accept'
    vm_elsewhere = 'iifname "virbr*" ip saddr 198.18.15.0/24 drop'
    links_out = 'iifname "na-m3n*" oifname != "na-m3n*" drop'
    # nft stops at the first verdict: the exceptions come before the drops
    order = [lines.index(rule) for rule in (to_vm, from_vm, vm_elsewhere, links_out)]
    assert order == sorted(order), lines


def test_a_lease_skips_live_holders_and_takes_a_dead_ones_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodenet, "LEASES", tmp_path)
    (tmp_path / "1").write_text("111\n")  # alive
    (tmp_path / "2").write_text("222\n")  # dead
    k = nodenet.lease(pid=333, alive=lambda pid: pid in {111, 333})
    assert k == 2
    assert (tmp_path / "2").read_text() == "333\n"
    assert nodenet.live_clusters(alive=lambda pid: pid in {111, 333}) == [1, 2]
    nodenet.release(2, pid=999)  # not the holder: kept
    assert (tmp_path / "2").exists()
    nodenet.release(2, pid=333)
    assert not (tmp_path / "2").exists()


def test_node_paths_are_private_dirs_under_the_node() -> None:
    node = Path("/x/node-1")
    assert nodemount.private_dir(node, "/etc/cni/net.d") == node / "fs/etc/cni/net.d"
    assert nodemount.enter_argv("na-m0-n1") == [
        "nsenter",
        "--net=/run/netns/na-m0-n1",
        f"--mount={nodemount.NS_DIR}/na-m0-n1",
        f"--uts={nodemount.NS_DIR}/na-m0-n1.uts",
        "--",
    ]


def test_a_crashed_clusters_nodes_are_found_again_beside_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness import multinode

    monkeypatch.setattr(nodenet, "LEASES", tmp_path / "leases")
    nodes = [
        multinode.Node(
            name=f"node-{i}",
            addr=nodenet.NodeAddr(4, i),
            dir=tmp_path / f"node-{i}",
            log_dir=tmp_path / "logs",
            containerd_pid=100 + i,
            agent_pid=200 + i,
        )
        for i in (1, 2)
    ]
    cluster = multinode.Cluster(
        plane=None,  # type: ignore[arg-type]  # not used by the state
        index=4,
        directory=tmp_path,
        registry_host="198.18.0.1:5000",
        nodes=nodes,
    )
    assert multinode.recorded_state(4) is None
    multinode.write_state(cluster)
    state = multinode.recorded_state(4)
    assert state is not None
    back = [multinode.Node.from_record(r) for r in state["nodes"]]
    assert [(n.name, n.ip, n.netns, n.containerd_pid, n.agent_pid) for n in back] == [
        ("node-1", "198.18.20.11", "na-m4-n1", 101, 201),
        ("node-2", "198.18.20.12", "na-m4-n2", 102, 202),
    ]

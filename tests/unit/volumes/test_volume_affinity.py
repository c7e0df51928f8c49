"""A PV's node affinity against the node's labels, as the kubelet's CheckNodeAffinity."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.volumemanager.affinity import AffinityError, check_node_affinity

LABELS = {"kubernetes.io/hostname": "n1", "zone": "a", "disks": "3"}


def pv(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


@pytest.mark.parametrize(
    ("volume", "ok"),
    [
        pytest.param({"spec": {}}, True, id="no affinity"),
        pytest.param(pv(expr("kubernetes.io/hostname", "In", "n1")), True, id="In matches"),
        pytest.param(pv(expr("kubernetes.io/hostname", "In", "n2")), False, id="In misses"),
        pytest.param(pv(expr("zone", "NotIn", "b")), True, id="NotIn"),
        pytest.param(pv(expr("rack", "Exists")), False, id="Exists misses"),
        pytest.param(pv(expr("rack", "DoesNotExist")), True, id="DoesNotExist"),
        pytest.param(pv(expr("disks", "Gt", "2")), True, id="Gt"),
        pytest.param(pv(expr("disks", "Lt", "2")), False, id="Lt"),
        pytest.param(pv(expr("zone", "In", "b"), expr("zone", "In", "a")), True, id="terms ORed"),
        pytest.param(pv({}), False, id="an empty term matches nothing"),
        pytest.param(
            pv({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
            True,
            id="matchFields on the node name",
        ),
    ],
)
def test_node_affinity(volume: dict[str, Any], ok: bool) -> None:
    if ok:
        check_node_affinity(volume, LABELS, "n1")
    else:
        with pytest.raises(AffinityError, match="no matching NodeSelectorTerms"):
            check_node_affinity(volume, LABELS, "n1")

"""This node's allocatable memory as the managers read it back from the Node object."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.nodestatus.allocatable import allocatable_memory


def node(**allocatable: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(node(memory="3Gi", cpu="2"), 3 * 2**30, id="binary suffix"),
        pytest.param(node(memory="1500M"), 1_500_000_000, id="decimal suffix"),
        pytest.param(node(memory=4096), 4096, id="a number"),
        pytest.param(node(cpu="2"), None, id="no memory figure"),
        pytest.param(node(memory="lots"), None, id="not a quantity"),
        pytest.param({"metadata": {"name": "n1"}}, None, id="no status yet"),
        pytest.param({"status": {"allocatable": None}}, None, id="allocatable null"),
        pytest.param(None, None, id="Node not known yet"),
    ],
)
def test_allocatable_memory(obj: dict[str, Any] | None, expected: int | None) -> None:
    assert allocatable_memory(obj) == expected

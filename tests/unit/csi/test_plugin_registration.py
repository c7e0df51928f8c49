"""A CSI driver registering through the plugin registry directory, as node-driver-registrar
does it: the real plugin manager and gRPC clients against a fake driver on unix sockets, and
the CSINode and Node in the in-memory API."""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodeagent.apiserver import NODES
from nodeagent.pluginmanager import PluginManager
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_csi import FakeCsiNode, FakeCsiServer
from nodeagent.volumemanager.csi import CSI_PLUGIN_TYPE, CsiPlugin
from nodeagent.volumemanager.csi.nodeinfo import (
    CSINODES,
    MIGRATED_PLUGINS,
    MIGRATED_PLUGINS_ANNOTATION,
    NODE_ID_ANNOTATION,
)

NODE = "node-a"
DRIVER = "hostpath.csi.k8s.io"


@pytest.fixture
def short_dir() -> AsyncIterator[Path]:
    # unix socket paths must stay under 108 bytes: tmp_path can be longer
    with tempfile.TemporaryDirectory(prefix="na-csi-") as d:
        yield Path(d)


@pytest.fixture
def server() -> FakeApiServer:
    api = FakeApiServer()
    api.seed(NODES, {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
    return api


def wire(root: Path, api: FakeApiServer) -> tuple[CsiPlugin, PluginManager]:
    csi = CsiPlugin(root_dir=str(root), node_name=NODE, api=api)
    plugins = PluginManager(root_dir=str(root), handlers={CSI_PLUGIN_TYPE: csi.registration})
    return csi, plugins


async def test_a_driver_registers_and_is_published_on_the_csinode_and_node(
    short_dir: Path, server: FakeApiServer
) -> None:
    csi, plugins = wire(short_dir, server)
    assert csi.node_info is not None
    await csi.node_info.initialize()
    csinode = server.stored(CSINODES, NODE)
    assert csinode is not None
    assert csinode["spec"]["drivers"] == []
    assert csinode["metadata"]["annotations"] == {MIGRATED_PLUGINS_ANNOTATION: MIGRATED_PLUGINS}
    node_uid = server.stored(NODES, NODE)["metadata"]["uid"]  # type: ignore[index]  # stored() is None when absent; here it exists
    assert csinode["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}
    ]

    node = FakeCsiNode(node_id="n-1", max_volumes=8, topology={"topology.hostpath.csi/node": NODE})
    fake = FakeCsiServer(
        node=node,
        name=DRIVER,
        endpoint=short_dir / "csi.sock",
        registration=plugins.directory / f"{DRIVER}-reg.sock",
    )
    plugins.directory.mkdir(parents=True, exist_ok=True)
    await fake.start()
    try:
        await plugins.sync()
        assert fake.statuses == [(True, "")]
        assert plugins.registered() == {DRIVER: CSI_PLUGIN_TYPE}
        assert csi.drivers.names() == [DRIVER]
        csinode = server.stored(CSINODES, NODE)
        assert csinode is not None
        assert csinode["spec"]["drivers"] == [
            {
                "name": DRIVER,
                "nodeID": "n-1",
                "topologyKeys": ["topology.hostpath.csi/node"],
                "allocatable": {"count": 8},
            }
        ]
        meta = server.stored(NODES, NODE)["metadata"]  # type: ignore[index]  # stored() is None when absent; here it exists
        assert json.loads(meta["annotations"][NODE_ID_ANNOTATION]) == {DRIVER: "n-1"}
        assert meta["labels"]["topology.hostpath.csi/node"] == NODE
        await plugins.sync()  # nothing changed: no second registration
        assert fake.statuses == [(True, "")]
    finally:
        await fake.stop()
    await plugins.sync()  # the socket is gone: deregistered
    assert plugins.registered() == {}
    assert csi.drivers.names() == []
    assert server.stored(CSINODES, NODE)["spec"]["drivers"] == []  # type: ignore[index]  # stored() is None when absent; here it exists
    meta = server.stored(NODES, NODE)["metadata"]  # type: ignore[index]  # stored() is None when absent; here it exists
    assert NODE_ID_ANNOTATION not in (meta.get("annotations") or {})


async def test_a_driver_without_a_csi_1_version_is_told_why(
    short_dir: Path, server: FakeApiServer
) -> None:
    csi, plugins = wire(short_dir, server)
    plugins.directory.mkdir(parents=True, exist_ok=True)
    fake = FakeCsiServer(
        node=FakeCsiNode(),
        name=DRIVER,
        endpoint=short_dir / "csi.sock",
        registration=plugins.directory / "reg.sock",
        versions=("0.3.0",),
    )
    await fake.start()
    try:
        await plugins.sync()
        await plugins.sync()  # a refused socket is not asked again until it changes
    finally:
        await fake.stop()
    assert fake.statuses == [
        (
            False,
            "RegisterPlugin error -- plugin validation failed with err: validation failed for "
            f"CSI Driver {DRIVER} at endpoint {short_dir / 'csi.sock'}: none of the versions "
            'specified ["0.3.0"] are supported',
        )
    ]
    assert csi.drivers.names() == []


async def test_a_plugin_of_an_unknown_type_is_refused(
    short_dir: Path, server: FakeApiServer
) -> None:
    _, plugins = wire(short_dir, server)
    plugins.directory.mkdir(parents=True, exist_ok=True)
    fake = FakeCsiServer(
        node=FakeCsiNode(),
        name="gpu",
        endpoint=short_dir / "dev.sock",
        registration=plugins.directory / "dev-reg.sock",
        plugin_type="DevicePlugin",
    )
    await fake.start()
    try:
        await plugins.sync()
    finally:
        await fake.stop()
    [(ok, error)] = fake.statuses
    assert not ok
    assert error.startswith(
        "RegisterPlugin error -- no handler registered for plugin type: DevicePlugin"
    )


async def test_a_driver_whose_node_info_fails_is_not_registered(
    short_dir: Path, server: FakeApiServer
) -> None:
    csi, plugins = wire(short_dir, server)
    plugins.directory.mkdir(parents=True, exist_ok=True)
    node = FakeCsiNode(node_id="")
    fake = FakeCsiServer(
        node=node,
        name=DRIVER,
        endpoint=short_dir / "csi.sock",
        registration=plugins.directory / "reg.sock",
    )
    await fake.start()
    try:
        await plugins.sync()
    finally:
        await fake.stop()
    [(ok, error)] = fake.statuses
    assert not ok
    assert "driverNodeID must not be empty" in error
    assert csi.drivers.names() == []


async def test_a_registry_deeper_than_a_socket_path_allows_still_registers(
    short_dir: Path, server: FakeApiServer
) -> None:
    deep = short_dir / ("d" * 60) / ("e" * 60)
    csi, plugins = wire(deep, server)
    plugins.directory.mkdir(parents=True)
    registration = plugins.directory / f"{DRIVER}-reg.sock"
    assert len(str(registration)) > 108
    fake = FakeCsiServer(
        node=FakeCsiNode(node_id="n-1"),
        name=DRIVER,
        endpoint=deep / "csi.sock",
        registration=registration,
    )
    await fake.start()
    try:
        await plugins.sync()
    finally:
        await fake.stop()
    assert fake.statuses == [(True, "")]
    assert csi.drivers.names() == [DRIVER]

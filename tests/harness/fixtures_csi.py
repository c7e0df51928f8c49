"""Pytest fixtures for the CSI hostpath driver on a test's node (loaded by tests/conftest.py).

``csi_hostpath`` deploys the driver ``make up`` deploys (harness/csi_hostpath.py: the stand-in
hostpath plugin with its registrar and liveness probe, the real external-provisioner, -attacher
and -resizer, the ``CSIDriver`` and the default StorageClass ``csi-hostpath-sc``) onto a node a
test started, and removes it afterwards. Use it inside the test, once the node is Ready::

    async def test_claim_keeps_data(control_plane, containerd, csi_hostpath, tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            driver = await csi_hostpath.deploy(node)   # plugin Ready and registered
            # create a PVC (no storageClassName: the default class) and a pod using it in
            # node.namespace; the claim binds once the pod is scheduled (WaitForFirstConsumer)
            ...
            # delete the test's pods and claims before the node's block ends, so that the
            # node unpublishes and unstages while the driver still runs

``deploy(node)`` pins the plugin's pod to the node, puts it in the node's namespace (the
node's teardown removes its containers) on the host's network, gives the sidecars a kubeconfig
(a Secret: a client certificate of the cluster CA named as the driver's ServiceAccount, which
the RBAC binds) so that they reach the API without the ``kubernetes`` Service (a test's node
runs no Service proxy, and the host's is ``make up``'s), reads the node's root dir from its config
(``node.rootDir``: the plugin's socket dir, ``plugins_registry``, ``pods`` and ``plugins``
under it) and keeps the volumes under ``tmp_path/csi-data``; it waits until the pod is Ready
and the node's ``CSINode`` lists ``hostpath.csi.k8s.io`` (the node registered the driver
through ``<root>/plugins_registry``), and raises with the pod's state and events otherwise.
The images are built and pushed to the session's registry once per session
(``csi_hostpath_images``); they are pulled through the registry mirror under their upstream
names. Teardown deletes the cluster-wide objects (CSIDriver, StorageClass, RBAC).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from harness import csi_hostpath as driver_objects
from harness import kubeconfig, loops
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv

DEPLOY_TIMEOUT = 240.0  # a cold pull of seven images on a loaded machine
KUBECONFIG_SECRET = "csi-hostpath-kubeconfig"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node(Protocol):
    """What ``deploy`` needs of a test's node (tests/integration/agentproc.AgentNode)."""

    name: str
    namespace: str
    config: Path


@dataclass(frozen=True, slots=True)
class Deployed:
    node: str
    namespace: str
    root_dir: Path
    data_dir: Path
    pod: str = f"{driver_objects.NAME}-0"


@dataclass
class CSIHostpath:
    plane: ControlPlane
    data_dir: Path
    deployed: list[Deployed] = field(default_factory=list)

    async def deploy(self, node: Node, *, within: float = DEPLOY_TIMEOUT) -> Deployed:
        root = driver_objects.node_root_dir(node.config)
        account = f"system:serviceaccount:{node.namespace}:{driver_objects.ACCOUNT}"
        client = self.plane.pki.client_cert(f"csi-hostpath-{node.namespace}", common_name=account)
        config = kubeconfig.render(
            server=self.plane.server, ca=self.plane.ca_path, user=account, client=client
        )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": KUBECONFIG_SECRET, "namespace": node.namespace},
            "stringData": {"kubeconfig": json.dumps(config)},
        }
        items = [
            secret,
            *driver_objects.manifests(
                root_dir=root,
                data_dir=self.data_dir,
                namespace=node.namespace,
                node_name=node.name,
                kubeconfig_secret=KUBECONFIG_SECRET,
                health_port=free_port(),
            ),
        ]
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        self.plane.kubectl("apply", "-f", "-", input=body)
        done = Deployed(
            node=node.name, namespace=node.namespace, root_dir=root, data_dir=self.data_dir
        )
        self.deployed.append(done)
        deadline = time.monotonic() + within
        while not (self._ready(done) and self._registered(done)):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the CSI hostpath driver was not Ready and registered on {node.name} "
                    f"within {within:.0f}s:\n{self.explain(done)}"
                )
            await asyncio.sleep(1)
        return done

    def _ready(self, d: Deployed) -> bool:
        got = self.plane.kubectl("get", "pod", "-n", d.namespace, d.pod, "-o", "json", check=False)
        if got.returncode != 0:
            return False
        conditions = json.loads(got.stdout).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _registered(self, d: Deployed) -> bool:
        got = self.plane.kubectl("get", "csinode", d.node, "-o", "json", check=False)
        if got.returncode != 0:
            return False
        drivers: list[dict[str, Any]] = json.loads(got.stdout).get("spec", {}).get("drivers") or []
        return any(x.get("name") == driver_objects.DRIVER for x in drivers)

    def explain(self, d: Deployed) -> str:
        kubectl = self.plane.kubectl
        pod = kubectl("get", "pod", "-n", d.namespace, d.pod, "-o", "yaml", check=False)
        events = kubectl("get", "events", "-n", d.namespace, check=False)
        csinode = kubectl("get", "csinode", d.node, "-o", "yaml", check=False)
        logs = kubectl(
            "logs", "-n", d.namespace, d.pod, "--all-containers", "--tail=30", check=False
        )
        return "\n".join(
            [pod.stdout, events.stdout, csinode.stdout + csinode.stderr, logs.stdout + logs.stderr]
        )

    def remove(self) -> None:
        for d in self.deployed:
            self.plane.kubectl(
                "delete", "statefulset", "-n", d.namespace, driver_objects.NAME,
                "--ignore-not-found", "--wait=false", check=False,
            )  # fmt: skip
        if self.deployed:
            driver_objects.remove(self.plane, namespace=self.deployed[0].namespace)
        self.deployed.clear()


@pytest.fixture(scope="session")
def csi_hostpath_images(containerd: RuntimeEnv, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Build the driver's images and push them to the session's registry (once); returns the
    registry host."""
    work = tmp_path_factory.mktemp("csi-hostpath-images")
    driver_objects.push(containerd.registry.host, work)
    return containerd.registry.host


@pytest.fixture
def csi_hostpath(
    control_plane: ControlPlane, csi_hostpath_images: str, tmp_path: Path
) -> Iterator[CSIHostpath]:
    driver = CSIHostpath(plane=control_plane, data_dir=tmp_path / "csi-data")
    try:
        yield driver
    finally:
        driver.remove()
        loops.detach_below(driver.data_dir)  # block volumes a failed test did not delete

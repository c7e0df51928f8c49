"""The node's pod CIDR from its Node object to the real containerd, and Ready following
containerd's NetworkReady, with the kubelet's message while it is false.

kube-controller-manager (``--allocate-node-cidrs``) gives the new Node a /24 of the cluster
range; the agent sends it with CRI ``UpdateRuntimeConfig``. This containerd has no CNI config,
only a ``conf_template``: it writes ``10-containerd-net.conflist`` from it when (and only when)
a pod CIDR arrives, and reports ``NetworkReady`` once a config is there. So the file's subnet
is the Node's ``spec.podCIDR`` only if the agent made the call, and the Node turns Ready only
then. Taking the file away makes containerd say NetworkReady=false again, and the Node goes
NotReady with the kubelet's words; putting it back makes it Ready. No pod is started: the
template's bridge never comes up, so the subnet cannot clash with any bridge of this machine.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentproc import agent_node, api_get, wait_ready
from harness.containerd import Containerd, ContainerdConfig, start_containerd, stop_containerd
from harness.controlplane import ControlPlane
from harness.images import BuiltImage

pytestmark = pytest.mark.integration

TEMPLATE = """{
  "cniVersion": "0.4.0",
  "name": "na-podcidr",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "na-cnipc",
      "isGateway": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
"""
CONFLIST = "10-containerd-net.conflist"
NOT_READY = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized"
)


@pytest.fixture
def templated_containerd(images: dict[str, BuiltImage]) -> Iterator[tuple[Containerd, Path]]:
    base = Path(tempfile.mkdtemp(prefix="na-pcidr-"))  # short: the socket path has a limit
    conf_dir = base / "net.d"
    conf_dir.mkdir()
    (base / "cni.template").write_text(TEMPLATE)
    config = ContainerdConfig(
        base_dir=base / "c", cni_conf_dir=conf_dir, cni_conf_template=base / "cni.template"
    )
    ctd = start_containerd(config)
    try:
        ctd.import_image(images["pause"].tarball)
        yield ctd, conf_dir
    finally:
        stop_containerd(ctd.base_dir, proc=ctd.proc)  # unmounts and removes base/c
        shutil.rmtree(base)


async def test_the_nodes_pod_cidr_reaches_containerd_and_ready_follows_network_ready(
    control_plane: ControlPlane, tmp_path: Path, templated_containerd: tuple[Containerd, Path]
) -> None:
    ctd, conf_dir = templated_containerd
    conflist = conf_dir / CONFLIST
    async with agent_node(control_plane, tmp_path, ctd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        pod_cidr = api_get(control_plane, f"/api/v1/nodes/{node.name}")["spec"]["podCIDR"]
        written = json.loads(conflist.read_text())
        assert written["plugins"][0]["ipam"]["ranges"] == [[{"subnet": pod_cidr}]]
        assert "Updating Pod CIDR" in node.log_text()

        saved = conflist.read_text()
        conflist.unlink()
        ready = await wait_ready(control_plane, node, status="False", within=60)
        assert ready["reason"] == "KubeletNotReady"
        assert ready["message"] == NOT_READY

        conflist.write_text(saved)
        await wait_ready(control_plane, node, status="True", within=60)
        # the CIDR went to the runtime once: the Node's allocation never changed
        assert node.log_text().count("Updating Pod CIDR") == 1

"""Private registries on the real containerd: a registry that needs a login (distribution with
htpasswd basic auth, `harness.registry`), pull secrets, a credential provider plugin, the pull
records, and image volumes.

The pod managers are wired as `nodeagent.pods.managers` wires them for `agent.build`, over the
private containerd of the `containerd` fixture (containerd 1.6 + runc) and the in-memory
`FakeApiServer` on the real clock (`podnode`). Every log record of the agent is captured at
-v=10 and searched for the password and its base64 forms.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from harness.containerd import write_hosts_toml
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BuiltImage
from harness.registry import Registry, push_image, start_registry
from podnode import Node, phase, running_node, status_of, until
from test_pod_failures import events_of, node_with_events, waiting

from nodeagent import log
from nodeagent.apiserver import Resource
from nodeagent.config import Config
from nodeagent.log.facade import settings as log_settings
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration

SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
USER = "puller"
PASSWORD = "na-Pa55-w0rd-8c1f"
LOGIN = (USER, PASSWORD)
PULL_FAILED = ("ErrImagePull", "ImagePullBackOff")


@pytest.fixture(scope="module")
def private(containerd: RuntimeEnv, images: dict[str, BuiltImage]) -> Iterator[Registry]:
    """A second registry that needs a login, with busybox as `private/busybox:1`, reachable
    over plain HTTP from the test containerd."""
    base = Path(tempfile.mkdtemp(prefix="na-reg-"))
    reg = start_registry(base, login=LOGIN)
    try:
        push_image(reg.host, images["busybox"].layout, "private/busybox:1", login=LOGIN)
        push_image(reg.host, images["busybox"].layout, "plugin/busybox:1", login=LOGIN)
        push_image(reg.host, images["busybox"].layout, "node/busybox:1", login=LOGIN)
        write_hosts_toml(containerd.containerd.base_dir / "certs.d", reg.host)
        yield reg
    finally:
        containerd.containerd.remove_images_from(reg.host)
        reg.stop()


def docker_config_json(host: str, user: str, password: str) -> dict[str, Any]:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = {"auths": {host: {"username": user, "password": password, "auth": auth}}}
    data = base64.b64encode(json.dumps(config).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": data},
    }


def seed_secret(node: Node, name: str, body: dict[str, Any]) -> None:
    node.server.seed(SECRETS, {**body, "metadata": {"name": name, "namespace": "default"}})


@contextlib.contextmanager
def agent_log_at_v10() -> Iterator[io.StringIO]:
    """Every log line of the agent (klog text with its fields) at -v=10."""
    out = io.StringIO()
    log.setup(verbosity=10, stream=out, target="stderr")
    try:
        yield out
    finally:
        log.reset()
        log_settings.verbosity = 0
        logging.getLogger("nodeagent").setLevel(logging.NOTSET)


def secret_forms(password: str) -> list[str]:
    pair = f"{USER}:{password}".encode()
    return [password, base64.b64encode(pair).decode(), base64.b64encode(pair).decode().rstrip("=")]


def assert_no_secret(text: str, node: Node | None = None) -> None:
    events = (
        json.dumps(node.server.objects(Resource("", "v1", "events", "Event", True))) if node else ""
    )
    for form in secret_forms(PASSWORD):
        assert form not in text, "a credential reached the agent's log"
        assert form not in events, "a credential reached an Event"


def pull_pod(
    node: Node,
    name: str,
    image: str,
    *,
    secrets: tuple[str, ...] = (),
    policy: str = "IfNotPresent",
) -> str:
    spec: dict[str, Any] = {
        "containers": [
            container("app", image=image, command=["sleep", "3600"], imagePullPolicy=policy)
        ],
    }
    if secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in secrets]
    return node.create(name, **spec)


def reasons(node: Node, pod: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in events_of(node, pod)]


async def test_pull_secrets_admit_the_right_pods_and_the_records_survive_a_restart(
    containerd: RuntimeEnv, private: Registry, tmp_path: Path
) -> None:
    image = private.image("private/busybox:1")
    with agent_log_at_v10() as agent_log:
        async with node_with_events(containerd, tmp_path) as node:
            seed_secret(node, "regcred", docker_config_json(private.host, USER, PASSWORD))
            seed_secret(node, "wrongcred", docker_config_json(private.host, USER, "not-it"))
            pull_pod(node, "with-secret", image, secrets=("regcred",))
            await until(
                "with-secret running",
                lambda: phase(node.pod("with-secret")) == "Running",
                within=90,
                explain=lambda: waiting(node, "with-secret"),
            )
            assert status_of(node.pod("with-secret")).get("ready") is True
            pulled = [m for r, m in reasons(node, "with-secret") if r == "Pulled"]
            assert pulled and pulled[0].startswith(f'Successfully pulled image "{image}"')

            # The image is on the node now: a pod without the login may not use it...
            pull_pod(node, "no-secret", image)
            pull_pod(node, "wrong-secret", image, secrets=("wrongcred",))
            pull_pod(node, "missing-secret", image, secrets=("nosuch",))
            for pod in ("no-secret", "wrong-secret", "missing-secret"):
                await until(
                    f"{pod} refused",
                    lambda p=pod: waiting(node, p).get("reason") in PULL_FAILED,
                    within=60,
                    explain=lambda p=pod: waiting(node, p),
                )
                message = waiting(node, pod).get("message", "")
                assert "401 Unauthorized" in message, message
                failed = [m for r, m in reasons(node, pod) if r == "Failed"]
                assert failed and f'Failed to pull image "{image}"' in failed[0]
            assert (
                "FailedToRetrieveImagePullSecret",
                "Unable to retrieve some image pull secrets (nosuch); attempting to pull the "
                "image may not succeed.",
            ) in reasons(node, "missing-secret")
            # ... while another pod with the secret may, without pulling.
            pull_pod(node, "same-secret", image, secrets=("regcred",))
            await until(
                "same-secret running",
                lambda: phase(node.pod("same-secret")) == "Running",
                within=60,
                explain=lambda: waiting(node, "same-secret"),
            )
            assert (
                "Pulled",
                f'Container image "{image}" already present on machine and can be accessed '
                "by the pod",
            ) in reasons(node, "same-secret")

        records = list((tmp_path / "root" / "image_manager" / "pulled").iterdir())
        docs = [json.loads(p.read_text()) for p in records]
        mine = [d for d in docs if "private/busybox" in json.dumps(d.get("credentialMapping"))]
        assert mine, docs
        assert mine[0]["kind"] == "ImagePulledRecord"
        creds = mine[0]["credentialMapping"][f"{private.host}/private/busybox"]
        assert [s["name"] for s in creds["kubernetesSecrets"]] == ["regcred"]

        # A new agent on the same root dir still knows who pulled the image.
        async with node_with_events(containerd, tmp_path) as node:
            pull_pod(node, "after-restart", image)
            await until(
                "after-restart refused",
                lambda: waiting(node, "after-restart").get("reason") in PULL_FAILED,
                within=60,
                explain=lambda: waiting(node, "after-restart"),
            )
            assert_no_secret(agent_log.getvalue(), node)
        text = agent_log.getvalue()
        assert "Pulling image" in text or "Started container" in text  # the log is captured
        assert_no_secret(text)


async def test_the_nodes_own_config_json_logs_in_for_every_pod(
    containerd: RuntimeEnv, private: Registry, tmp_path: Path
) -> None:
    """The kubelet's node keyring: ``config.json`` in the root dir; the image it pulled serves
    every pod of the node (``nodePodsAccessible``)."""
    image = private.image("node/busybox:1")
    root = tmp_path / "root"
    root.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (root / "config.json").write_text(json.dumps({"auths": {private.host: {"auth": auth}}}))
    with agent_log_at_v10() as agent_log:
        async with node_with_events(containerd, tmp_path) as node:
            pull_pod(node, "node-login", image, policy="Always")
            await until(
                "node-login running",
                lambda: phase(node.pod("node-login")) == "Running",
                within=90,
                explain=lambda: waiting(node, "node-login"),
            )
            pull_pod(node, "any-pod", image)
            await until(
                "any-pod running",
                lambda: phase(node.pod("any-pod")) == "Running",
                within=60,
                explain=lambda: waiting(node, "any-pod"),
            )
            assert (
                "Pulled",
                f'Container image "{image}" already present on machine and can be accessed '
                "by the pod",
            ) in reasons(node, "any-pod")
            assert_no_secret(agent_log.getvalue(), node)
    docs = [json.loads(p.read_text()) for p in (root / "image_manager" / "pulled").iterdir()]
    mapping = {k: v for d in docs for k, v in (d.get("credentialMapping") or {}).items()}
    assert mapping[f"{private.host}/node/busybox"] == {"nodePodsAccessible": True}
    assert "found valid config.json" in agent_log.getvalue()


PLUGIN = """#!/usr/bin/env python3
import json, sys
request = json.load(sys.stdin)
with open({calls!r}, "a") as f:
    f.write(request["image"] + "\\n")
json.dump({{
    "kind": "CredentialProviderResponse",
    "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
    "cacheKeyType": "Registry",
    "auth": {{{host!r}: {{"username": {user!r}, "password": {password!r}}}}},
}}, sys.stdout)
"""


async def test_a_credential_provider_plugin_supplies_the_login_and_is_cached(
    containerd: RuntimeEnv, private: Registry, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "plugins"
    bin_dir.mkdir()
    calls = tmp_path / "plugin-calls"
    plugin = bin_dir / "test-provider"
    plugin.write_text(
        PLUGIN.format(calls=str(calls), host=private.host, user=USER, password=PASSWORD)
    )
    plugin.chmod(0o755)
    config = tmp_path / "credential-providers.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1\n"
        "kind: CredentialProviderConfig\n"
        "providers:\n"
        "- name: test-provider\n"
        f"  matchImages: ['{private.host}/plugin']\n"
        "  defaultCacheDuration: 10m\n"
        "  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
    )

    def with_plugins(cfg: Config) -> Config:
        node = msgspec.structs.replace(
            cfg.node,
            image_credential_provider_config_path=str(config),
            image_credential_provider_bin_dir=str(bin_dir),
        )
        return msgspec.structs.replace(cfg, node=node)

    image = private.image("plugin/busybox:1")
    with agent_log_at_v10() as agent_log:
        async with running_node(containerd, tmp_path, configure=with_plugins) as node:
            # Always: each pod pulls, each pull asks for credentials.
            pull_pod(node, "first", image, policy="Always")
            await until(
                "first running",
                lambda: phase(node.pod("first")) == "Running",
                within=90,
                explain=lambda: waiting(node, "first"),
            )
            pull_pod(node, "second", image, policy="Always")
            await until(
                "second running",
                lambda: phase(node.pod("second")) == "Running",
                within=90,
                explain=lambda: waiting(node, "second"),
            )
            # An image the plugin does not match gets no credentials from it.
            pull_pod(node, "unmatched", private.image("private/busybox:1"), policy="Always")
            await until(
                "unmatched refused",
                lambda: waiting(node, "unmatched").get("reason") in PULL_FAILED,
                within=60,
                explain=lambda: waiting(node, "unmatched"),
            )
        # Cached by registry for defaultCacheDuration: the plugin ran once, for the repository.
        assert calls.read_text().splitlines() == [f"{private.host}/plugin/busybox"]
        assert_no_secret(agent_log.getvalue())


async def test_an_image_volume_fails_visibly_on_a_runtime_without_image_mounts(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    """containerd 1.6 has no CRI ``Mount.image`` (containerd 2.1 and later mount image
    volumes): the container is refused with the runtime's error, never started without the
    volume."""
    image = containerd.registry.image("busybox:latest")
    async with node_with_events(containerd, tmp_path) as node:
        node.create(
            "image-volume",
            containers=[
                container(
                    "app",
                    image=image,
                    command=["sleep", "3600"],
                    volumeMounts=[{"name": "data", "mountPath": "/data"}],
                )
            ],
            volumes=[{"name": "data", "image": {"reference": image, "pullPolicy": "IfNotPresent"}}],
        )

        await until(
            "image-volume refused by the runtime",
            lambda: waiting(node, "image-volume").get("reason") not in (None, "ContainerCreating"),
            within=60,
        )
        state = waiting(node, "image-volume")
        assert state["reason"] == "CreateContainerError", state
        assert phase(node.pod("image-volume")) == "Pending"
        failed = [e["message"] for e in events_of(node, "image-volume") if e["reason"] == "Failed"]
        assert failed and failed[0].startswith("Error: "), failed

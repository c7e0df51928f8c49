"""Private registries with ``nodeagent run`` on the real control plane and containerd, a
registry that needs a login (distribution with htpasswd basic auth, started by the same
``harness.registry.start_registry`` ``make up`` uses, with ``make up``'s login):

- the README's example, command for command: ``kubectl create secret docker-registry`` and
  ``kubectl run`` with ``imagePullSecrets`` runs; without the secret the pod waits in
  ``ErrImagePull``/``ImagePullBackOff`` with the registry's 401 and a ``Failed`` Event;
- a credential provider plugin in the service-account token mode (``tokenAttributes``): the
  agent asks the apiserver for a token (TokenRequest, bound to the pod, for the plugin's
  audience, allowed to the node by RBAC as ``ServiceAccountNodeAudienceRestriction``
  requires) and passes it with the annotations the plugin asked for; the plugin script checks
  both before it answers, and the test has the apiserver review the token;
- at ``-v=10`` no password, ``auth`` string or token reaches the agent's log, an Event or
  ``/configz``.
"""

from __future__ import annotations

import base64
import json
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import AgentNode, agent_node, api_get, configure_kubelet, running, wait_ready
from harness.containerd import write_hosts_toml
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BuiltImage
from harness.registry import Registry, push_image, start_registry
from harness.runtime_up import PRIVATE_LOGIN
from podnode import until

pytestmark = pytest.mark.integration

USER, PASSWORD = PRIVATE_LOGIN
AUDIENCE = "registry.nodeagent.test"
ROLE_KEY = "registry.nodeagent.test/role"
TEAM_KEY = "registry.nodeagent.test/team"
ABSENT_KEY = "registry.nodeagent.test/absent"
PULL_FAILED = ("ErrImagePull", "ImagePullBackOff")


@pytest.fixture(scope="module")
def private(containerd: RuntimeEnv, images: dict[str, BuiltImage]) -> Iterator[Registry]:
    """A registry with ``make up``'s login holding ``private/busybox:latest`` (the README's
    image) and ``tokens/busybox:1`` (the token-mode plugin's), plain HTTP for containerd."""
    base = Path(tempfile.mkdtemp(prefix="na-regc-"))
    reg = start_registry(base, login=PRIVATE_LOGIN)
    try:
        for name in ("private/busybox:latest", "tokens/busybox:1"):
            push_image(reg.host, images["busybox"].layout, name, login=PRIVATE_LOGIN)
        write_hosts_toml(containerd.containerd.base_dir / "certs.d", reg.host)
        yield reg
    finally:
        containerd.containerd.remove_images_from(reg.host)
        reg.stop()


def secret_forms(*values: str) -> list[str]:
    """Each credential as it could leak: as is, and ``user:password`` in base64 (padded or
    not), as ``kubectl create secret docker-registry`` writes the ``auth`` field."""
    forms = []
    for value in values:
        pair = base64.b64encode(f"{USER}:{value}".encode()).decode()
        forms += [value, pair, pair.rstrip("=")]
    return forms


def leaks(control_plane: ControlPlane, node: AgentNode, forms: list[str]) -> dict[str, list[str]]:
    """Where any of ``forms`` shows: the agent's log, the namespace's Events, /configz."""
    events = control_plane.kubectl("get", "events", "-n", node.namespace, "-o", "json").stdout
    configz = control_plane.kubectl(
        "get", "--raw", f"/api/v1/nodes/{node.name}/proxy/configz"
    ).stdout
    assert json.loads(configz)["kubeletconfig"]["logging"]["verbosity"] == 10
    places = {"log": node.log_text(), "events": events, "configz": configz}
    return {where: [f for f in forms if f in text] for where, text in places.items()}


def waiting(control_plane: ControlPlane, node: AgentNode, pod: str) -> dict[str, Any]:
    obj = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/pods/{pod}") or {}
    statuses = (obj.get("status") or {}).get("containerStatuses") or [{}]
    state: dict[str, Any] = statuses[0].get("state", {}).get("waiting") or {}
    return state


def event_messages(control_plane: ControlPlane, node: AgentNode, pod: str) -> list[str]:
    found = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/events") or {}
    return [
        f"{e['reason']}: {e['message']}"
        for e in found.get("items", [])
        if e["involvedObject"]["name"] == pod
    ]


async def refused(control_plane: ControlPlane, node: AgentNode, pod: str) -> dict[str, Any]:
    state: dict[str, Any] = await until(
        f"{pod} refused by the registry",
        lambda: (w := waiting(control_plane, node, pod)).get("reason") in PULL_FAILED and w,
        within=90,
        every=0.5,
        explain=lambda: (waiting(control_plane, node, pod), node.log_tail(1500)),
    )
    return state


async def test_the_readme_private_registry_example_and_no_credential_leaks(
    control_plane: ControlPlane, containerd: RuntimeEnv, private: Registry, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure_kubelet(node, control_plane, logging={"verbosity": 10})
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns, reg = node.namespace, private.host
        kubectl = control_plane.kubectl
        # The README's commands (each pod pinned to this node: other tests' nodes are in the
        # cluster, and the README's single-node cluster has no other).
        kubectl(
            "create", "secret", "docker-registry", "regcred", "-n", ns,
            f"--docker-server={reg}", f"--docker-username={USER}",
            f"--docker-password={PASSWORD}",
        )  # fmt: skip
        overrides = {"spec": {"imagePullSecrets": [{"name": "regcred"}], "nodeName": node.name}}
        kubectl(
            "run", "private", "-n", ns, f"--image={reg}/private/busybox:latest",
            f"--overrides={json.dumps(overrides)}", "--", "sleep", "3600",
        )  # fmt: skip
        await running(control_plane, node, "private")
        kubectl(
            "run", "nosecret", "-n", ns, f"--image={reg}/private/busybox:latest",
            f"--overrides={json.dumps({'spec': {'nodeName': node.name}})}", "--", "sleep", "3600",
        )  # fmt: skip
        state = await refused(control_plane, node, "nosecret")
        assert "401 Unauthorized" in state.get("message", ""), state
        failed = [m for m in event_messages(control_plane, node, "nosecret") if "Failed" in m]
        assert any(f'Failed to pull image "{reg}/private/busybox:latest"' in m for m in failed)

        found = leaks(control_plane, node, secret_forms(PASSWORD))
        assert found == {"log": [], "events": [], "configz": []}, found
        log = node.log_text()
        assert "Pulling image" in log or "Image pull" in log  # the -v=10 log was captured
        record_dir = tmp_path / "root" / "image_manager" / "pulled"
        records = "".join(p.read_text() for p in record_dir.iterdir())
        assert '"name":"regcred"' in records
        assert not [f for f in secret_forms(PASSWORD) if f in records]


PLUGIN = """#!/usr/bin/env python3
import json, sys
request = json.load(sys.stdin)
expected = {expected!r}
token = request.get("serviceAccountToken", "")
annotations = request.get("serviceAccountAnnotations")
with open({calls!r}, "a") as f:
    f.write(json.dumps({{"image": request.get("image"), "annotations": annotations,
                         "token": bool(token)}}) + "\\n")
if not token or annotations != expected:
    sys.stderr.write("no token or not the annotations asked for: %r" % (annotations,))
    sys.exit(1)
with open({token_file!r}, "w") as f:
    f.write(token)
json.dump({{
    "kind": "CredentialProviderResponse",
    "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
    "cacheKeyType": "Registry",
    "auth": {{{host!r}: {{"username": {user!r}, "password": {password!r}}}}},
}}, sys.stdout)
"""


def token_plugin(tmp_path: Path, registry: Registry) -> tuple[Path, Path, Path, Path]:
    """The plugin's bin dir and config, and the files it writes (its calls, the token)."""
    bin_dir = tmp_path / "plugins"
    bin_dir.mkdir()
    calls, token_file = tmp_path / "plugin-calls", tmp_path / "plugin-token"
    plugin = bin_dir / "token-provider"
    plugin.write_text(
        PLUGIN.format(
            expected={ROLE_KEY: "reader", TEAM_KEY: "blue"},
            calls=str(calls),
            token_file=str(token_file),
            host=registry.host,
            user=USER,
            password=PASSWORD,
        )
    )
    plugin.chmod(0o755)
    config = tmp_path / "credential-providers.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubelet.config.k8s.io/v1",
                "kind": "CredentialProviderConfig",
                "providers": [
                    {
                        "name": "token-provider",
                        "matchImages": [f"{registry.host}/tokens"],
                        "defaultCacheDuration": "10m",
                        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
                        "tokenAttributes": {
                            "serviceAccountTokenAudience": AUDIENCE,
                            "cacheType": "ServiceAccount",
                            "requireServiceAccount": True,
                            "requiredServiceAccountAnnotationKeys": [ROLE_KEY],
                            "optionalServiceAccountAnnotationKeys": [TEAM_KEY, ABSENT_KEY],
                        },
                    }
                ],
            }
        )
    )
    return bin_dir, config, calls, token_file


def allow_audience(control_plane: ControlPlane, node: AgentNode, name: str) -> None:
    """RBAC for the node to request tokens for ``AUDIENCE`` (the NodeRestriction admission's
    ``request-serviceaccounts-token-audience`` check: the audience is in no pod volume)."""
    objects = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": [AUDIENCE],
                    "verbs": ["request-serviceaccounts-token-audience"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{node.name}",
                }
            ],
        },
    ]
    control_plane.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
    )


def pod(node: AgentNode, name: str, image: str, account: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node.name,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "app",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
            }
        ],
    }
    if account:
        spec["serviceAccountName"] = account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create(control_plane: ControlPlane, node: AgentNode, body: dict[str, Any]) -> None:
    control_plane.kubectl("create", "-n", node.namespace, "-f", "-", input=json.dumps(body))


async def test_a_plugin_in_token_mode_gets_a_bound_token_and_its_annotations(
    control_plane: ControlPlane, containerd: RuntimeEnv, private: Registry, tmp_path: Path
) -> None:
    bin_dir, plugin_config, calls, token_file = token_plugin(tmp_path, private)
    image = private.image("tokens/busybox:1")
    rbac = f"na-it-token-audience-{secrets.token_hex(3)}"
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        try:
            allow_audience(control_plane, node, rbac)
            configure_kubelet(node, control_plane, logging={"verbosity": 10})
            settings = yaml.safe_load(node.config.read_text())
            settings["node"]["imageCredentialProviderConfigPath"] = str(plugin_config)
            settings["node"]["imageCredentialProviderBinDir"] = str(bin_dir)
            node.config.write_text(yaml.safe_dump(settings))
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            ns = node.namespace
            account = {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "puller",
                    "annotations": {ROLE_KEY: "reader", TEAM_KEY: "blue", "other": "x"},
                },
            }
            create(control_plane, node, account)

            create(control_plane, node, pod(node, "tokened", image, account="puller"))
            await running(control_plane, node, "tokened")

            # The plugin got a token and exactly the annotations it asked for (it checked
            # them itself, or the pull would have failed); the apiserver vouches for the
            # token: this service account, the plugin's audience, bound to the pod.
            [call] = [json.loads(line) for line in calls.read_text().splitlines()]
            assert call == {
                "image": f"{private.host}/tokens/busybox",
                "annotations": {ROLE_KEY: "reader", TEAM_KEY: "blue"},
                "token": True,
            }
            token = token_file.read_text()
            code, review = control_plane.api_request(
                "POST",
                "/apis/authentication.k8s.io/v1/tokenreviews",
                body={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token, "audiences": [AUDIENCE]},
                },
            )
            assert code == 201, review
            status = review["status"]
            assert status["authenticated"] is True, status
            assert status["audiences"] == [AUDIENCE]
            assert status["user"]["username"] == f"system:serviceaccount:{ns}:puller"
            assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["tokened"]

            # The default service account lacks the required annotation: no plugin, no login.
            create(control_plane, node, pod(node, "default-account", image))
            state = await refused(control_plane, node, "default-account")
            assert "401 Unauthorized" in state.get("message", ""), state

            # Another pod of the same service account uses the image without pulling: the pull
            # record names the service account; the plugin's answer is cached per account.
            create(control_plane, node, pod(node, "same-account", image, account="puller"))
            await running(control_plane, node, "same-account")
            assert any(
                "already present on machine and can be accessed by the pod" in m
                for m in event_messages(control_plane, node, "same-account")
            )
            assert len(calls.read_text().splitlines()) == 1

            found = leaks(control_plane, node, [token, *secret_forms(PASSWORD)])
            assert found == {"log": [], "events": [], "configz": []}, found
        finally:
            control_plane.kubectl(
                "delete", "clusterrolebinding,clusterrole", rbac, "--ignore-not-found"
            )
    records = [
        json.loads(p.read_text())
        for p in (tmp_path / "root" / "image_manager" / "pulled").iterdir()
    ]
    mapping = {k: v for r in records for k, v in (r.get("credentialMapping") or {}).items()}
    accounts = mapping[f"{private.host}/tokens/busybox"]["kubernetesServiceAccounts"]
    assert [(a["namespace"], a["name"]) for a in accounts] == [(node.namespace, "puller")]

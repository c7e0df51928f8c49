"""A static pod manifest becomes the pod the kubelet would run, or an error naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from nodeagent.podspec import decode_pod
from nodeagent.qos import is_critical_pod
from nodeagent.staticpods import ManifestError, parse_manifest, static_pod

PATH = "/etc/kubernetes/manifests/web.yaml"
NODE = "Node-A"

WEB = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: app
    image: localhost/busybox:latest
    command: [sleep, "3600"]
"""


def build(text: str = WEB, *, path: str = PATH, node: str = NODE) -> dict[str, Any]:
    return static_pod(parse_manifest(text, path=path), path=path, node_name=node)


def test_a_manifest_becomes_a_pod_named_after_the_node_with_the_kubelets_annotations() -> None:
    pod = build()
    meta = pod["metadata"]
    uid = meta["uid"]
    assert len(uid) == 32 and int(uid, 16) >= 0  # md5, hex
    assert meta["name"] == "web-node-a"  # the node name, lowercased
    assert meta["namespace"] == "default"
    assert meta["labels"] == {"app": "web"}
    assert meta["annotations"] == {
        "kubernetes.io/config.hash": uid,
        "kubernetes.io/config.source": "file",
    }
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}]
    assert pod["status"] == {"phase": "Pending"}
    decoded = decode_pod(pod)
    assert decoded.is_static and not decoded.is_mirror and is_critical_pod(decoded)


def test_the_uid_depends_on_the_pod_the_file_and_the_node_but_not_on_formatting() -> None:
    uid = build()["metadata"]["uid"]
    as_json = json.dumps(yaml.safe_load(WEB), indent=4, sort_keys=False)
    assert build(as_json)["metadata"]["uid"] == uid
    assert build()["metadata"]["uid"] == uid
    assert build(path="/etc/kubernetes/manifests/other.yaml")["metadata"]["uid"] != uid
    assert build(node="node-b")["metadata"]["uid"] != uid
    assert build(WEB.replace('"3600"', '"60"'))["metadata"]["uid"] != uid


def test_a_namespace_and_an_existing_no_execute_toleration_are_kept() -> None:
    text = WEB.replace("  name: web\n", "  name: web\n  namespace: kube-system\n")
    text += "  tolerations:\n  - {operator: Exists, effect: NoExecute}\n"
    pod = build(text)
    assert pod["metadata"]["namespace"] == "kube-system"
    assert pod["spec"]["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}]


@pytest.mark.parametrize(
    ("extra", "priority"),
    [
        pytest.param("  priorityClassName: system-node-critical\n", 2000001000, id="node class"),
        pytest.param(
            "  priorityClassName: system-cluster-critical\n", 2000000000, id="cluster class"
        ),
        pytest.param("  priorityClassName: my-class\n", None, id="other class: unresolved"),
        pytest.param(
            "  priorityClassName: system-node-critical\n  priority: 5\n", 5, id="explicit wins"
        ),
    ],
)
def test_builtin_priority_classes_give_static_pods_their_priority(
    extra: str, priority: int | None
) -> None:
    assert build(WEB + extra)["spec"].get("priority") == priority


def test_yaml_dates_stay_strings_as_in_the_kubelets_yaml_to_json() -> None:
    text = WEB + "    env:\n    - {name: DAY, value: 2026-01-01}\n"
    assert build(text)["spec"]["containers"][0]["env"] == [{"name": "DAY", "value": "2026-01-01"}]


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        pytest.param(
            WEB.replace("kind: Pod", "kind: Deployment"), "kind", '"Deployment"', id="kind"
        ),
        pytest.param(
            WEB.replace("apiVersion: v1", "apiVersion: v2"), "apiVersion", '"v2"', id="api"
        ),
        pytest.param(WEB.replace("  name: web\n", ""), "metadata.name", "Required", id="no name"),
        pytest.param(
            WEB.replace("name: web", "name: Web_1"), "metadata.name", "RFC 1123", id="bad name"
        ),
        pytest.param(
            WEB.split("  containers:", maxsplit=1)[0] + "  containers: []\n",
            "spec.containers",
            "at least one container",
            id="no containers",
        ),
        pytest.param(
            WEB.replace("    image: localhost/busybox:latest\n", ""),
            "spec.containers[0].image",
            "Required",
            id="no image",
        ),
        pytest.param(
            WEB + "  - {name: app, image: busybox}\n",
            "spec.containers[1].name",
            'Duplicate value: "app"',
            id="duplicate container",
        ),
        pytest.param(
            WEB + "  ephemeralContainers:\n  - {name: dbg, image: busybox}\n",
            "spec.ephemeralContainers",
            "Forbidden: cannot be set on create",
            id="ephemeral containers",
        ),
        pytest.param(
            WEB + "  restartPolicy: Sometimes\n",
            "spec.restartPolicy",
            '"Sometimes"',
            id="restart policy",
        ),
        pytest.param(
            WEB + "    ports:\n    - containerPort: http\n",
            "spec.containers[0].ports[0].containerPort",
            "Expected `int`",
            id="wrong type",
        ),
        pytest.param("kind: Pod\n  bad: [indent\n", "", "not valid YAML", id="yaml"),
        pytest.param(WEB + "---\n" + WEB, "", "one pod per file; found 2", id="two documents"),
        pytest.param("", "", "empty manifest", id="empty"),
        pytest.param("- a\n- b\n", "", "got a list", id="a list"),
    ],
)
def test_a_bad_manifest_names_the_file_and_the_field(text: str, field: str, message: str) -> None:
    with pytest.raises(ManifestError) as raised:
        build(text)
    assert raised.value.path == PATH
    assert raised.value.field == field
    assert message in raised.value.message
    assert str(raised.value).startswith(f"{PATH}: {field or '(document)'}: ")

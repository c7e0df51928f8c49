"""Small helpers of the multi-node tests: objects, waits, and running commands in pods."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from harness.controlplane import ControlPlane

WEB = "echo $(hostname) > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"
# The same server plus /cgi-bin/who: "<hostname> <client address>" as the server sees the client.
WHO = (
    "mkdir -p /tmp/cgi-bin"
    " && printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho \"$(hostname)"
    " $REMOTE_ADDR\"\\n' > /tmp/cgi-bin/who && chmod +x /tmp/cgi-bin/who && " + WEB
)


def wait(what: str, check: Callable[[], Any], *, within: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}")
        time.sleep(every)


def web_pod_spec(*, script: str = WEB, **extra: Any) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "web",
                "image": "busybox",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }
        ],
        **extra,
    }


def deployment(name: str, namespace: str, replicas: int, **spec_extra: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": web_pod_spec(**spec_extra)},
        },
    }


def pods(plane: ControlPlane, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["pods", "-n", namespace, *(["-l", selector] if selector else [])]
    items: list[dict[str, Any]] = plane.get_json(*args)["items"]
    return items


def live(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods not being deleted."""
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions", [])
    )


def by_node(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in items:
        out.setdefault(p["spec"].get("nodeName", ""), []).append(p["metadata"]["name"])
    return out


def fetch(plane: ControlPlane, namespace: str, pod: str, url: str) -> str | None:
    """GET `url` from inside `pod` with busybox wget (3 s); the body, or None."""
    done = plane.kubectl(
        "exec", "-n", namespace, pod, "--", "timeout", "3", "wget", "-q", "-O", "-", url,
        check=False,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else None


def attempt(
    plane: ControlPlane, namespace: str, pod: str, url: str, *, seconds: int = 3
) -> tuple[int, str, str]:
    """GET `url` from inside `pod` with busybox wget: (exit status, body, error text)."""
    done = plane.kubectl(
        "exec", "-n", namespace, pod, "--", "timeout", str(seconds), "wget", "-q", "-O", "-",
        url, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout.strip(), done.stderr.strip()


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


def node_obj(plane: ControlPlane, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = plane.get_json("node", name)
    return obj


def condition(node: dict[str, Any], kind: str = "Ready") -> dict[str, Any]:
    return next((c for c in node["status"].get("conditions", []) if c["type"] == kind), {})

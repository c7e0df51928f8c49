"""Probe cost: RSS and CPU of a node whose pods each have an exec readiness probe and
an httpGet liveness probe every second; nodeagent vs the kubelet, each on a fresh containerd.

    PYTHONPATH=tests .venv/bin/python bench/probe_cost.py [--pods 100] [--idle-minutes 2]
        [--only nodeagent|kubelet] [--markdown]

``pod_startup``'s run (fresh containerd, the component as a new Node, pods created at once,
then an idle window sampling the component's RSS and CPU and containerd's CPU) with every pod
a busybox ``httpd`` whose container has ``readinessProbe: exec [true]`` and ``livenessProbe:
httpGet :8080/`` (``periodSeconds: 1``). No single pods, one burst. The idle window is the
figure: the probes are all that happens on the node then. Needs root and the reference
kubelet (``PYTHONPATH=tests .venv/bin/python -m harness build --peers``).
"""

from __future__ import annotations

from typing import Any

import pod_api
import pod_startup

HTTPD = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"
_plain_pod = pod_api.sleep_pod


def probed_pod(name: str, *, namespace: str, node: str, image: str, by_scheduler: bool) -> dict:
    """``pod_api.sleep_pod`` serving HTTP on 8080, with an exec and an http probe every 1 s."""
    body: dict[str, Any] = _plain_pod(
        name, namespace=namespace, node=node, image=image, by_scheduler=by_scheduler
    )
    container = body["spec"]["containers"][0]
    container["command"] = ["sh", "-c", HTTPD]
    container["readinessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    container["livenessProbe"] = {
        "httpGet": {"port": 8080, "path": "/"},
        "periodSeconds": 1,
        "failureThreshold": 3,
    }
    return body


def main(argv: list[str]) -> int:
    defaults = ["--singles", "0", "--more", "0", "--pods", "100"]
    pod_api.sleep_pod = probed_pod  # the pods pod_startup creates
    return pod_startup.main(defaults + argv)


if __name__ == "__main__":
    pod_startup.script(main)

"""The soak's workload, carried out with kubectl: Deployments (each with a Service) whose pods
have readiness and liveness probes, postStart and preStop hooks, emptyDir and configMap volumes
and a sidecar; Jobs; bare pods deleted with and without grace; readiness turned off and on in
running pods. And the probe clients: a DaemonSet whose pods send requests to every Service
(`targets`, a file the runner keeps up to date) and write who answered to a host file."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane

from soak.plan import Action

NAMESPACE = "soak"
REQUEST_TIMEOUT = "--request-timeout=10s"
KUBECTL_TIMEOUT = 30  # discovery is not bound by --request-timeout

# httpd serves `/ready` while the file exists: the readiness probe; `/` answers the pod's name
WEB = (
    "mkdir -p /www && hostname > /www/index.html && touch /www/ready"
    " && exec httpd -f -p 8080 -h /www"
)
READY_FILE = "/www/ready"
SIDECAR = "trap 'exit 0' TERM; while true; do sleep 1; done"
CLIENT = r"""
while true; do
  for t in $(cat /out/targets 2>/dev/null); do
    r=$(timeout 2 wget -q -O- "http://${t#*,}/" 2>/dev/null)  # (busybox wget -T crashes)
    if [ -n "$r" ]; then read up _ < /proc/uptime; echo "$up ${t%%,*} $r" >> "/out/$NODE.hits"; fi
  done
  sleep 0.3
done
"""


def web_spec(*, sidecar: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "web",
                "image": "busybox",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", WEB],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {
                    "httpGet": {"path": "/ready", "port": 8080},
                    "periodSeconds": 1,
                    "failureThreshold": 1,
                },
                "livenessProbe": {
                    "tcpSocket": {"port": 8080},
                    "periodSeconds": 5,
                    "failureThreshold": 6,
                },
                "lifecycle": {
                    "postStart": {"exec": {"command": ["sh", "-c", "date > /data/started"]}},
                    "preStop": {"exec": {"command": ["sleep", "1"]}},
                },
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "config", "mountPath": "/config"},
                ],
            }
        ],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "config", "configMap": {"name": "soak-config"}},
        ],
    }
    if sidecar:
        spec["initContainers"] = [
            {
                "name": "sidecar",
                "image": "busybox",
                "imagePullPolicy": "IfNotPresent",
                "restartPolicy": "Always",
                "command": ["sh", "-c", SIDECAR],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ]
    return spec


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": web_spec()},
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def job(name: str, seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 6,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", str(seconds)],
                        }
                    ],
                }
            },
        },
    }


def bare_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"soak": "bare"}},
        "spec": web_spec(sidecar=False),
    }


def clients(out_dir: Path) -> dict[str, Any]:
    labels = {"app": "soak-client"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "soak-client", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "client",
                            "image": "busybox",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", CLIENT],
                            "env": [
                                {
                                    "name": "NODE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                }
                            ],
                            "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                        }
                    ],
                    "volumes": [
                        {"name": "out", "hostPath": {"path": str(out_dir), "type": "Directory"}}
                    ],
                },
            },
        },
    }


def config_map() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "soak-config", "namespace": NAMESPACE},
        "data": {"greeting": "soak"},
    }


def unready_command(seconds: int, ready: str = READY_FILE) -> str:
    """Removes the ready file and leaves a process that puts it back after ``seconds``. A
    subshell, not ``nohup``: the image's busybox (Debian's busybox-static) has no ``nohup``
    applet, so ``nohup ...`` failed with 127 and the pod stayed not ready for good (the
    no-convergence verdicts of seeds 21 and 60, with both peers)."""
    return f"rm -f {ready}; (sleep {seconds}; touch {ready}) >/dev/null 2>&1 &"


class Workload:
    """Applies `Action`s; a failed kubectl call (the apiserver away, the agent away for an
    exec) is counted and reported, never raised: the workload goes on as users' would."""

    def __init__(self, plane: ControlPlane, out_dir: Path) -> None:
        self.plane = plane
        self.out_dir = out_dir
        self.errors: list[str] = []
        self.done = 0
        self.deadline: float | None = None
        """While a fault lasts, when it is planned to end (``time.time()``): no kubectl call
        waits past it, so the fault's end is not held up by calls the control plane cannot
        answer."""

    def _kubectl(self, *args: str, input: str | None = None) -> str | None:
        argv = [str(self.plane.kubectl_path), f"--kubeconfig={self.plane.admin_kubeconfig}"]
        timeout = float(KUBECTL_TIMEOUT)
        if self.deadline is not None:
            timeout = max(1.0, min(timeout, self.deadline - time.time()))
        try:
            got = subprocess.run(
                [*argv, REQUEST_TIMEOUT, "-n", NAMESPACE, *args],
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.errors.append(f"kubectl {' '.join(args[:3])}: no answer in {timeout:.0f}s")
            return None
        if got.returncode != 0:
            self.errors.append(f"kubectl {' '.join(args[:3])}: {got.stderr.strip()[:200]}")
            return None
        return got.stdout

    def _apply(self, *objects: dict[str, Any]) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self._kubectl("apply", "-f", "-", input=body)

    def setup(self) -> None:
        self.plane.kubectl("create", "namespace", NAMESPACE)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "targets").write_text("")
        self._apply(config_map(), clients(self.out_dir))

    def _pods_of(self, app: str) -> list[str]:
        out = self._kubectl(
            "get", "pods", "-l", f"app={app}", "-o",
            "jsonpath={range .items[?(@.status.phase=='Running')]}{.metadata.name} {end}",
        )  # fmt: skip
        return sorted((out or "").split())

    def apply(self, action: Action) -> None:
        self.done += 1
        k, name = action.kind, action.name
        if k == "deploy-create":
            self._apply(deployment(name, action.arg), service(name))
        elif k == "deploy-scale":
            self._kubectl("scale", "deployment", name, f"--replicas={action.arg}")
        elif k == "deploy-roll":
            annotations = {"soak/roll": str(action.arg)}
            patch = {"spec": {"template": {"metadata": {"annotations": annotations}}}}
            self._kubectl("patch", "deployment", name, "--type=merge", "-p", json.dumps(patch))
        elif k == "deploy-delete":
            self._kubectl("delete", "deployment,service", name, "--wait=false")
        elif k == "job-create":
            self._apply(job(name, action.arg))
        elif k == "job-delete":
            self._kubectl("delete", "job", name, "--wait=false", "--cascade=background")
        elif k == "pod-create":
            self._apply(bare_pod(name))
        elif k == "pod-delete":
            self._kubectl("delete", "pod", name, "--wait=false")
        elif k == "pod-delete-now":
            self._kubectl("delete", "pod", name, "--wait=false", "--grace-period=0", "--force")
        elif k in ("pod-kill", "unready"):
            self._in_a_pod(action)
        else:
            raise ValueError(f"unknown action {k!r}")

    def _in_a_pod(self, action: Action) -> None:
        pods = self._pods_of(action.name)
        if not pods:
            return
        pod = pods[action.arg % len(pods)]
        if action.kind == "pod-kill":
            grace = ["--grace-period=0", "--force"] if action.arg % 2 == 0 else []
            self._kubectl("delete", "pod", pod, "--wait=false", *grace)
        else:  # not ready for 5-30 s, then ready again (a process left behind in the pod)
            change = unready_command(5 + action.arg % 26)
            self._kubectl("exec", pod, "-c", "web", "--", "sh", "-c", change)

    def write_targets(self, services: Sequence[tuple[str, str]]) -> None:
        """`name,ip:80` per Service, for the clients (written whole, then renamed)."""
        tmp = self.out_dir / "targets.tmp"
        tmp.write_text("".join(f"{name},{ip}:80\n" for name, ip in services))
        tmp.replace(self.out_dir / "targets")

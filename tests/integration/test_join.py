"""`nodeagent join` against the real apiserver and controller-manager (the bootstrap signer).

The control plane publishes `kube-public/cluster-info`, `kube-system/kubelet-config` and
kubeadm's RBAC; a token made as `kubeadm token create` makes it is signed into the ConfigMap by
kube-controller-manager. Then, as an operator would: the join command the control plane prints;
the agent started with the flags join wrote, running with the cluster's kubelet settings; the
Node Ready; its serving certificate approved. A wrong CA hash, a wrong token and a malformed
kubelet-config are refused with a message naming the mismatch, and no file exists afterwards.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.controlplane_args import free_port
from harness.fixtures_runtime import RuntimeEnv
from harness.join_up import approve_serving_csr, join_and_start

from nodeagent.join.files import read_flags_env

pytestmark = pytest.mark.integration

WRONG_HASH = "sha256:" + "ab" * 32


def write_config(tmp_path: Path, *, runtime_endpoint: str = "") -> Path:
    kubelet: dict[str, Any] = {
        "failCgroupV1": False,  # this host may be cgroup v1
        "port": free_port(),  # a `make up` node may hold 10250
        "healthzPort": free_port(),
    }
    if runtime_endpoint:
        kubelet["containerRuntimeEndpoint"] = runtime_endpoint
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {
                    "kubeconfig": str(tmp_path / "etc" / "kubeconfig"),
                    "rootDir": str(tmp_path / "root"),
                },
                "kubelet": kubelet,
                "proxy": {"enabled": False},  # the host's root netns is not this test's
            }
        )
    )
    return config


def node_api_get(control_plane: ControlPlane, config: Path, path: str) -> tuple[int, str] | None:
    """GET the node's API as an apiserver with `--kubelet-certificate-authority` does: with its
    kubelet client certificate, trusting only the cluster CA for the node's serving certificate
    (issued by the kubelet-serving signer; the host name is not checked, the test dials
    127.0.0.1); None while nothing listens yet."""
    port = yaml.safe_load(config.read_text())["kubelet"]["port"]
    client = control_plane.pki.apiserver_kubelet_client
    context = ssl.create_default_context(cafile=str(control_plane.ca_path))
    context.check_hostname = False
    context.load_cert_chain(client.cert, client.key)
    url = f"https://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError as e:
        if isinstance(e.reason, ConnectionRefusedError):
            return None
        raise


def join(config: Path, *argv: str, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "join", *argv, "--config", str(config),
         "--node-name", node, "--no-start"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def join_argv(command: str) -> list[str]:
    """The arguments of the printed `nodeagent join ...` line."""
    words = command.split()
    assert words[:2] == ["nodeagent", "join"], command
    return words[2:]


def signed(control_plane: ControlPlane, token_id: str) -> bool:
    data = control_plane.get_json("-n", "kube-public", "configmap", "cluster-info")["data"]
    return f"jws-kubeconfig-{token_id}" in data


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != "config.yaml")


def ready(control_plane: ControlPlane, name: str) -> dict[str, Any]:
    got = control_plane.kubectl("get", "node", name, "-o", "json", check=False)
    if got.returncode != 0:
        return {}
    conditions = json.loads(got.stdout)["status"].get("conditions", [])
    return {c["type"]: c for c in conditions}.get("Ready", {})


CLUSTER_WIDE = ("clusterDNS", "clusterDomain", "serverTLSBootstrap", "rotateCertificates")


def check_written_kubelet_config(
    control_plane: ControlPlane, joined: str, path: Path, config: Path
) -> dict[str, Any]:
    """The cluster's kubelet settings, as the ConfigMap holds them, written beside (not in) the
    node's config; returns the published KubeletConfiguration."""
    wrote = "Wrote the cluster's kubelet configuration (ConfigMap kube-system/kubelet-config)"
    assert f"{wrote} to {path}" in joined
    cm = control_plane.get_json("-n", "kube-system", "configmap", "kubelet-config")
    published: dict[str, Any] = yaml.safe_load(cm["data"]["kubelet"])
    written = yaml.safe_load(path.read_text())
    assert written["kind"] == "KubeletConfiguration"
    assert [written[f] for f in CLUSTER_WIDE] == [published[f] for f in CLUSTER_WIDE]
    assert published["serverTLSBootstrap"] is True
    assert "syncFrequency" not in written  # kubeadm's 0s: Go's unset, the default applies
    assert "cluster-kubelet-config" not in config.read_text()
    return published


def test_the_printed_join_command_joins_a_node_that_becomes_ready(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    name = "joined-node"
    command = control_plane.join_command()
    config = write_config(tmp_path, runtime_endpoint=containerd.endpoint)
    log = tmp_path / "nodeagent.log"
    # What `make up` does for each further node: join --no-start, then the agent with its flags.
    proc, joined = join_and_start(command, config=config, node_name=name, log=log)
    assert "is signed by token id" in joined
    assert "The API server's TLS verifies against the pinned CA" in joined

    flags = read_flags_env(tmp_path / "root" / "join-flags.env")
    boot = tmp_path / "etc" / "bootstrap-kubeconfig"
    ca = tmp_path / "root" / "pki" / "ca.crt"
    kubelet_config = tmp_path / "root" / "kubelet-config.yaml"
    assert flags == (
        f"--bootstrap-kubeconfig={boot}",
        f"--client-ca-file={ca}",
        f"--cluster-kubelet-config={kubelet_config}",
        f"--hostname-override={name}",
    )
    assert boot.stat().st_mode & 0o777 == 0o600
    assert ca.read_bytes() == control_plane.ca_path.read_bytes()
    published = check_written_kubelet_config(control_plane, joined, kubelet_config, config)
    try:
        deadline = time.monotonic() + 90
        while ready(control_plane, name).get("status") != "True":
            assert proc.alive(), log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        # serverTLSBootstrap from the cluster: the node asks for a serving certificate and
        # serves its API once an operator approved it.
        assert approve_serving_csr(control_plane, name, timeout=60, waiting=proc.alive), (
            log.read_text()[-3000:]
        )
        csrs = control_plane.get_json("csr")["items"]
        # The apiserver's kubelet client certificate (what logs, exec and port-forward use)
        # is accepted: the agent verifies it against the CA join wrote; the node's serving
        # certificate verifies against the cluster CA.
        deadline = time.monotonic() + 60
        while (answer := node_api_get(control_plane, config, "/pods")) is None:
            assert proc.alive(), log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        status, body = answer
        assert status == 200, body[:500]
        assert json.loads(body)["kind"] == "PodList"
        # The agent runs with the cluster's settings: /configz shows them.
        answer = node_api_get(control_plane, config, "/configz")
        assert answer is not None and answer[0] == 200, answer
        running = json.loads(answer[1])["kubeletconfig"]
        assert [running[f] for f in CLUSTER_WIDE] == [published[f] for f in CLUSTER_WIDE]
    finally:
        proc.stop(timeout=20)
        control_plane.kubectl("delete", "node", name, "--ignore-not-found", check=False)
    assert proc.popen is not None and proc.popen.returncode == 0, log.read_text()[-3000:]
    token_id = join_argv(command)[2].split(".")[0]
    mine = [c for c in csrs if c["spec"]["username"] == f"system:bootstrap:{token_id}"]
    assert len(mine) == 1
    assert "system:bootstrappers:kubeadm:default-node-token" in mine[0]["spec"]["groups"]
    assert [c["type"] for c in mine[0]["status"]["conditions"]] == ["Approved"]
    assert (tmp_path / "root" / "pki" / "kubelet-client-current.pem").exists()
    serving = [
        c
        for c in csrs
        if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
        and c["spec"]["username"] == f"system:node:{name}"
    ]
    assert [c["status"]["conditions"][0]["type"] for c in serving] == ["Approved"]


def test_a_wrong_ca_hash_is_refused_and_nothing_is_written(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    argv = join_argv(control_plane.join_command())
    argv[argv.index("--discovery-token-ca-cert-hash") + 1] = WRONG_HASH
    config = write_config(tmp_path)
    done = join(config, *argv, node="wrong-hash")
    assert done.returncode == 1, done.stdout
    assert (
        "nodeagent join: the cluster CA in the cluster-info ConfigMap has public key sha256:"
        in (done.stderr)
    )
    assert f"matches none of the --discovery-token-ca-cert-hash values ({WRONG_HASH})" in (
        done.stderr
    )
    assert files_under(tmp_path) == []


def test_a_wrong_token_secret_is_refused_and_nothing_is_written(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    argv = join_argv(control_plane.join_command())
    token_id, secret = argv[2].split(".")
    deadline = time.monotonic() + 30
    while not signed(control_plane, token_id):  # the signer's moment, as kubeadm waits
        assert time.monotonic() < deadline, "the bootstrap signer did not sign cluster-info"
        time.sleep(0.5)
    wrong = secret[:-1] + ("a" if secret[-1] != "a" else "b")
    argv[2] = f"{token_id}.{wrong}"
    config = write_config(tmp_path)
    done = join(config, *argv, node="wrong-token")
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip() == (
        f"nodeagent join: the JWS signature jws-kubeconfig-{token_id} in the cluster-info "
        f'ConfigMap does not verify with the secret of token id "{token_id}" (bad_signature): '
        "can't trust this API server; is the token right?"
    )
    assert wrong not in done.stdout + done.stderr
    assert files_under(tmp_path) == []


def test_an_unknown_token_id_is_refused_after_the_discovery_timeout(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    argv = join_argv(control_plane.join_command())
    argv[2] = "zzzzzz.0123456789abcdef"  # no such Secret: the signer never signs for it
    config = write_config(tmp_path)
    done = join(config, *argv, "--discovery-timeout", "6s", node="unknown-token")
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith(
        'nodeagent join: the cluster-info ConfigMap has no JWS signature for token id "zzzzzz"'
    )
    assert done.stderr.strip().endswith("(discovery gave up after 6s; no signature each time)")
    assert files_under(tmp_path) == []


def _set_kubelet_config(control_plane: ControlPlane, text: str) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kubelet-config", "namespace": "kube-system"},
        "data": {"kubelet": text},
    }
    control_plane.kubectl("replace", "-f", "-", input=json.dumps(cm))


def test_a_malformed_kubelet_config_is_refused_naming_key_and_field_and_nothing_is_written(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    argv = join_argv(control_plane.join_command())
    text = (
        "apiVersion: kubelet.config.k8s.io/v1beta1\n"
        "kind: KubeletConfiguration\n"
        "clusterDNS:\n- 10.96.0.10\n"
        "maxPods: lots\n"
    )
    _set_kubelet_config(control_plane, text)
    try:
        done = join(write_config(tmp_path), *argv, node="bad-kubelet-config")
    finally:
        control_plane.publish_kubelet_config()
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith(
        "nodeagent join: the cluster's kubelet configuration is not valid for this node; "
        "nothing was written:\n"
    ), done.stderr
    assert (
        'ConfigMap kube-system/kubelet-config key "kubelet":5: maxPods: expected an integer, '
        'got "lots"'
    ) in done.stderr
    assert files_under(tmp_path) == []


def test_a_cluster_without_kubelet_config_is_joined_with_the_nodes_config_alone(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    argv = join_argv(control_plane.join_command())
    control_plane.kubectl("delete", "-n", "kube-system", "configmap", "kubelet-config")
    try:
        done = join(write_config(tmp_path), *argv, node="no-kubelet-config")
    finally:
        control_plane.publish_kubelet_config()
    assert done.returncode == 0, done.stderr
    assert (
        "ConfigMap kube-system/kubelet-config does not exist: no cluster-wide kubelet settings"
    ) in done.stdout
    assert files_under(tmp_path) == [
        "etc",
        "etc/bootstrap-kubeconfig",
        "root",
        "root/join-flags.env",
        "root/pki",
        "root/pki/ca.crt",
    ]
    flags = read_flags_env(tmp_path / "root" / "join-flags.env")
    assert not [f for f in flags if f.startswith("--cluster-kubelet-config")]

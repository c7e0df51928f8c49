"""``nodeagent join`` end to end over fakes: what it writes, and that a refusal writes nothing."""

from __future__ import annotations

import io
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit.join.join_vectors import EC_CA, EC_PIN, KUBECONFIG, KUBECONFIG_JWS, RSA_PIN, TOKEN

from nodeagent.__main__ import build_parser
from nodeagent.apiserver import Forbidden, Obj
from nodeagent.join import cli, kubeletconfig
from nodeagent.join.files import read_flags_env
from nodeagent.join.token import BootstrapToken
from nodeagent.testing.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.looptime

SIGNED: Obj = {
    "kind": "ConfigMap",
    "data": {"kubeconfig": KUBECONFIG, "jws-kubeconfig-abcdef": KUBECONFIG_JWS},
}


class FakeSteps(cli.Steps):
    def __init__(
        self,
        *,
        systemd: bool = False,
        ready_node: bool | Exception = False,
        restart_problem: str | None = None,
        api: FakeApiServer | None = None,
    ) -> None:
        self.api = api or FakeApiServer()  # what the bootstrap token reads: no kubelet-config
        self.fetched: list[bytes | None] = []
        self.restarted = 0
        self.waited_for: list[Path] = []
        self._systemd = systemd
        self._ready_node = ready_node
        self.node_checked: list[str] = []

        async def fetch(server: str, *, ca_pem: bytes | None) -> Obj:
            self.fetched.append(ca_pem)
            return dict(SIGNED)

        async def ready_node_exists(
            *, server: str, ca_pem: bytes, token: BootstrapToken, node_name: str
        ) -> bool:
            self.node_checked.append(node_name)
            if isinstance(self._ready_node, Exception):
                raise self._ready_node
            return self._ready_node

        async def wait(kubeconfig: Path, *, give_up_after: float) -> None:
            self.waited_for.append(kubeconfig)

        def restart() -> str | None:
            self.restarted += 1
            return restart_problem

        async def fetch_kubelet_config(
            *, server: str, ca_pem: bytes, token: BootstrapToken
        ) -> Obj | kubeletconfig.NotPublished:
            return await kubeletconfig.fetch(self.api)

        self.fetch = fetch
        self.ready_node_exists = ready_node_exists
        self.fetch_kubelet_config = fetch_kubelet_config
        self.systemd_manages_agent = lambda: self._systemd
        self.restart_agent = restart
        self.wait_for_tls_bootstrap = wait
        self.hostname = lambda: "Host-1"


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A config whose every path lies under tmp_path/etc and tmp_path/var (not created)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {
                    "kubeconfig": str(tmp_path / "etc" / "kubeconfig"),
                    "rootDir": str(tmp_path / "var"),
                },
            }
        )
    )
    return tmp_path


def join(node: Path, *argv: str, steps: FakeSteps | None = None) -> tuple[int, str, str]:
    args = build_parser().parse_args(
        ["join", "198.18.0.1:6443", "--config", str(node / "config.yaml"), *argv]
    )
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(args, out=out, err=err, steps=steps or FakeSteps())
    return code, out.getvalue(), err.getvalue()


def written(node: Path) -> list[str]:
    return sorted(str(p.relative_to(node)) for p in node.rglob("*") if p.name != "config.yaml")


PINNED = ("--token", TOKEN, "--discovery-token-ca-cert-hash", EC_PIN)


def test_a_verified_join_writes_the_bootstrap_kubeconfig_and_the_flags(node: Path) -> None:
    steps = FakeSteps()
    code, out, err = join(
        node, *PINNED, "--node-name", "worker-1", "--node-ip", "10.0.0.5", steps=steps
    )
    assert (code, err) == (0, "")
    assert steps.fetched == [None, EC_CA.encode()]
    assert steps.node_checked == ["worker-1"]
    boot = node / "etc" / "bootstrap-kubeconfig"
    assert stat.S_IMODE(boot.stat().st_mode) == 0o600
    doc = yaml.safe_load(boot.read_text())
    assert doc["clusters"][0]["name"] == "kubernetes"
    assert doc["clusters"][0]["cluster"]["server"] == "https://198.18.0.1:6443"
    assert doc["users"] == [{"name": "tls-bootstrap-token-user", "user": {"token": TOKEN}}]
    assert doc["current-context"] == "tls-bootstrap-token-user@kubernetes"
    ca = node / "var" / "pki" / "ca.crt"
    assert (ca.read_text(), stat.S_IMODE(ca.stat().st_mode)) == (EC_CA, 0o644)
    flags = read_flags_env(node / "var" / "join-flags.env")
    assert flags == (
        f"--bootstrap-kubeconfig={boot}",
        f"--client-ca-file={ca}",
        "--hostname-override=worker-1",
        "--node-ip=10.0.0.5",
    )
    assert f"nodeagent run --config {node / 'config.yaml'} {' '.join(flags)}" in out
    assert TOKEN.split(".")[1] not in out
    assert steps.restarted == 0  # no systemd here


def test_the_node_name_defaults_to_the_lower_cased_host_name(node: Path) -> None:
    steps = FakeSteps()
    assert join(node, *PINNED, steps=steps)[0] == 0
    assert steps.node_checked == ["host-1"]
    assert read_flags_env(node / "var" / "join-flags.env") == (
        f"--bootstrap-kubeconfig={node / 'etc' / 'bootstrap-kubeconfig'}",
        f"--client-ca-file={node / 'var' / 'pki' / 'ca.crt'}",
    )


def test_a_client_ca_the_configuration_names_is_kept_and_no_ca_is_written(node: Path) -> None:
    config = node / "config.yaml"
    doc = yaml.safe_load(config.read_text())
    doc["kubelet"] = {"authentication": {"x509": {"clientCAFile": "/etc/pki/my-ca.pem"}}}
    config.write_text(yaml.safe_dump(doc))
    assert join(node, *PINNED, steps=FakeSteps())[0] == 0
    assert read_flags_env(node / "var" / "join-flags.env") == (
        f"--bootstrap-kubeconfig={node / 'etc' / 'bootstrap-kubeconfig'}",
    )
    assert not (node / "var" / "pki" / "ca.crt").exists()


def test_under_systemd_join_restarts_the_agent_waits_and_drops_the_token(node: Path) -> None:
    steps = FakeSteps(systemd=True)
    code, out, _ = join(node, *PINNED, steps=steps)
    assert code == 0
    assert steps.restarted == 1
    assert steps.waited_for == [node / "etc" / "kubeconfig"]
    assert not (node / "etc" / "bootstrap-kubeconfig").exists()
    assert "This node has joined the cluster" in out


def test_a_failed_restart_is_a_warning_and_the_wait_decides(node: Path) -> None:
    steps = FakeSteps(systemd=True, restart_problem="Job for nodeagent.service failed")
    code, out, _ = join(node, *PINNED, steps=steps)
    assert code == 0
    assert "[kubelet-start] WARNING: unable to restart nodeagent.service: Job for" in out
    assert steps.waited_for == [node / "etc" / "kubeconfig"]


def test_no_start_under_systemd_only_writes(node: Path) -> None:
    steps = FakeSteps(systemd=True)
    assert join(node, *PINNED, "--no-start", steps=steps)[0] == 0
    assert steps.restarted == 0
    assert (node / "etc" / "bootstrap-kubeconfig").exists()


def test_several_hashes_any_one_matching_is_enough(node: Path) -> None:
    hashes = ("--discovery-token-ca-cert-hash", RSA_PIN, "--discovery-token-ca-cert-hash", EC_PIN)
    assert join(node, "--token", TOKEN, *hashes)[0] == 0


def test_unsafe_skip_asks_once_and_joins(node: Path) -> None:
    steps = FakeSteps()
    code, out, _ = join(
        node, "--token", TOKEN, "--discovery-token-unsafe-skip-ca-verification", steps=steps
    )
    assert code == 0
    assert steps.fetched == [None]
    assert "its CA was NOT checked" in out


REFUSALS = [
    pytest.param(
        ("--token", TOKEN),
        {},
        "using token-based discovery without --discovery-token-ca-cert-hash can be unsafe",
        id="no hash and no unsafe flag",
    ),
    pytest.param(
        ("--token", TOKEN, "--discovery-token-ca-cert-hash", RSA_PIN),
        {},
        f"has public key {EC_PIN}, which matches none of the --discovery-token-ca-cert-hash "
        f"values ({RSA_PIN})",
        id="wrong CA hash",
    ),
    pytest.param(
        ("--token", "abcdef.0123456789abcdee", "--discovery-token-ca-cert-hash", EC_PIN),
        {},
        'does not verify with the secret of token id "abcdef"',
        id="wrong token secret",
    ),
    pytest.param(
        ("--token", "abc.def", "--discovery-token-ca-cert-hash", EC_PIN),
        {},
        "--token: the bootstrap token is not of the form",
        id="malformed token",
    ),
    pytest.param(
        ("--token", TOKEN, "--discovery-token-ca-cert-hash", "md5:00"),
        {},
        "unknown hash format 'md5'",
        id="malformed hash",
    ),
    pytest.param(
        PINNED,
        {"ready_node": True},
        'a Node with name "host-1" and status "Ready" already exists in the cluster',
        id="name taken by a Ready node",
    ),
    pytest.param(
        PINNED,
        {"ready_node": Forbidden("nodes is forbidden", verb="GET", path="/api/v1/nodes/host-1")},
        "cannot get Node 'host-1' from https://198.18.0.1:6443 (the server cluster-info names) "
        "with the bootstrap token: GET /api/v1/nodes/host-1: nodes is forbidden (403 )",
        id="node check forbidden",
    ),
]


@pytest.mark.parametrize(("argv", "steps", "message"), REFUSALS)
def test_a_refusal_names_the_mismatch_and_writes_nothing(
    node: Path, argv: tuple[str, ...], steps: dict[str, Any], message: str
) -> None:
    code, out, err = join(node, *argv, steps=FakeSteps(**steps))
    assert code == 1
    assert err.startswith("nodeagent join: ")
    assert message in err
    assert written(node) == []
    assert "0123456789abcde" not in out + err


def test_an_endpoint_with_a_path_is_refused(node: Path) -> None:
    args = build_parser().parse_args(["join", "https://x:1/api", *PINNED])
    err = io.StringIO()
    assert cli.run(args, out=io.StringIO(), err=err, steps=FakeSteps()) == 1
    assert "API_SERVER_ENDPOINT 'https://x:1/api': expected host:port" in err.getvalue()


def test_a_joined_node_is_not_joined_again(node: Path) -> None:
    (node / "etc").mkdir()
    (node / "etc" / "kubeconfig").write_text("x")
    code, _, err = join(node, *PINNED)
    assert code == 1
    assert f"this node has joined already: {node / 'etc' / 'kubeconfig'} exists" in err
    assert written(node) == ["etc", "etc/kubeconfig"]


def test_a_bad_node_name_is_a_usage_error_naming_the_joins_flag(node: Path) -> None:
    code, _, err = join(node, *PINNED, "--node-name", "Bad_Name")
    assert code == 2
    assert err.startswith("nodeagent join: invalid configuration: --node-name")
    assert written(node) == []


def test_a_path_with_a_space_cannot_go_into_the_flags_file(tmp_path: Path) -> None:
    node = tmp_path / "with space"
    node.mkdir()
    (node / "config.yaml").write_text(
        "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"
        f"node: {{kubeconfig: '{node}/kubeconfig', rootDir: '{node}/var'}}\n"
    )
    code, _, err = join(node, *PINNED)
    assert code == 1
    assert "cannot go into NODEAGENT_JOIN_ARGS" in err
    assert written(node) == []

"""Starting the agent after a join, and the checks kubeadm makes around it.

- :func:`ready_node_exists`: before anything is written, ask the cluster (with the bootstrap
  token, over the verified TLS) whether a Ready Node of this name exists already; kubeadm
  refuses then, since two agents under one name fight over one Node. The cluster lets
  bootstrap tokens ``get`` nodes for this (kubeadm's ``kubeadm:get-nodes`` ClusterRole).
- :func:`systemd_manages_agent` / :func:`restart_agent`: with systemd as PID 1 and
  ``nodeagent.service`` installed, join restarts it, as kubeadm restarts the kubelet (a failed
  restart is a warning, as kubeadm's: systemd retries the unit and the wait below decides);
- :func:`wait_for_tls_bootstrap`: then wait (every 5 s, kubeadm's
  ``TLSBootstrapRetryInterval``; 5 min, its ``timeouts.tlsBootstrap``) until the node
  kubeconfig loads with a client certificate: the agent's credentials manager writes it once
  its CSR is approved and issued.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

from nodeagent.apiserver import NODES, ApiClient, Endpoint, NotFound, load_kubeconfig
from nodeagent.errors import ConfigError
from nodeagent.join.token import BootstrapToken, JoinError

UNIT: Final = "nodeagent.service"
TLS_BOOTSTRAP_INTERVAL: Final = 5.0
TLS_BOOTSTRAP_TIMEOUT: Final = 300.0

Run = Callable[..., "subprocess.CompletedProcess[str]"]


async def ready_node_exists(
    *, server: str, ca_pem: bytes, token: BootstrapToken, node_name: str
) -> bool:
    client = ApiClient(endpoint=Endpoint(server=server, ca_pem=ca_pem, token=token.value))
    try:
        node = await client.get(NODES, node_name)
    except NotFound:
        return False
    finally:
        await client.aclose()
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def systemd_manages_agent(
    *, run: Run = subprocess.run, systemd_dir: Path = Path("/run/systemd/system")
) -> bool:
    """systemd is PID 1 (``sd_booted``'s test) and knows ``nodeagent.service``."""
    if not systemd_dir.is_dir():
        return False
    done = run(
        ["systemctl", "show", "--property=LoadState", "--value", UNIT],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and done.stdout.strip() == "loaded"


def restart_agent(*, run: Run = subprocess.run) -> str | None:
    """``systemctl restart``; what went wrong, or None. Not fatal, as in kubeadm's
    ``TryStartKubelet``: a start that timed out (the unit's ``TimeoutStartSec`` on a slow
    host) is retried by systemd (``Restart=always``), and TLS bootstrap, early in the start,
    may well be done by then; the wait decides."""
    done = run(["systemctl", "restart", UNIT], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return done.stderr.strip().replace("\n", " ") or f"exit status {done.returncode}"
    return None


def bootstrapped(kubeconfig: Path) -> bool:
    """The node kubeconfig is there and loads with its client certificate and key."""
    try:
        return load_kubeconfig(kubeconfig).client_cert_pem is not None
    except ConfigError:
        return False


async def wait_for_tls_bootstrap(
    kubeconfig: Path,
    *,
    give_up_after: float = TLS_BOOTSTRAP_TIMEOUT,
    interval: float = TLS_BOOTSTRAP_INTERVAL,
    check: Callable[[Path], bool] = bootstrapped,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_after
    while not check(kubeconfig):
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise JoinError(
                f"the agent did not complete TLS bootstrap within {give_up_after:g}s: {kubeconfig} "
                f"does not exist or holds no client certificate; see journalctl -u {UNIT}"
            )
        await asyncio.sleep(min(interval, remaining))

"""Token discovery, kubeadm's way: ask, verify, ask again over verified TLS, compare.

:func:`discover` mirrors ``RetrieveValidatedConfigInfo`` of the pinned kubeadm:

1. GET ``kube-public/cluster-info`` anonymously with TLS unverified, every 5 s
   (``DiscoveryRetryInterval``) until the answer carries a signature for the token id or the
   discovery timeout (5 min, kubeadm's ``timeouts.discovery``) runs out; a failed request or a
   missing signature is retried, the last reason is what a timeout reports;
2. verify the signature and, unless the operator chose
   ``--discovery-token-unsafe-skip-ca-verification``, the CA pin (:mod:`.verify`); a bad one is
   refused at once, it will not get better;
3. with a pin: GET the ConfigMap again verifying TLS against the CA just learnt (same retries),
   and refuse unless its ``kubeconfig`` is the very text that was verified.

Nothing is written here; the caller writes only once this returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, Protocol

from nodeagent.apiserver import ApiError, Obj
from nodeagent.join.token import BootstrapToken, JoinError
from nodeagent.join.verify import (
    CLUSTER_INFO,
    KUBECONFIG_KEY,
    ClusterInfo,
    SignatureMissing,
    verify_cluster_info,
)

RETRY_INTERVAL: Final = 5.0  # kubeadm's DiscoveryRetryInterval
DEFAULT_TIMEOUT: Final = 300.0  # kubeadm's timeouts.discovery


class FetchClusterInfo(Protocol):
    def __call__(self, server: str, *, ca_pem: bytes | None) -> Awaitable[Obj]: ...


async def discover(
    *,
    server: str,
    token: BootstrapToken,
    pins: frozenset[str],
    fetch: FetchClusterInfo,
    give_up_after: float = DEFAULT_TIMEOUT,
    interval: float = RETRY_INTERVAL,
    say: Callable[[str], None] = lambda line: None,
) -> ClusterInfo:
    """The verified cluster behind ``server`` (``https://host:port``), or ``JoinError``."""
    say(f"[discovery] Requesting {CLUSTER_INFO} from {server} (TLS not verified yet)")
    until_signed = partial(
        _until_signed,
        token=token,
        pins=pins,
        give_up_after=give_up_after,
        interval=interval,
        say=say,
    )
    first, info = await until_signed(lambda: fetch(server, ca_pem=None))
    if not info.pinned:
        say(
            f"[discovery] {CLUSTER_INFO} is signed by token id {token.token_id!r}; "
            "its CA was NOT checked (--discovery-token-unsafe-skip-ca-verification)"
        )
        return info
    say(
        f"[discovery] {CLUSTER_INFO} is signed by token id {token.token_id!r} and its CA's "
        f"public key is pinned ({', '.join(info.ca_pins)})"
    )
    say(f"[discovery] Requesting {CLUSTER_INFO} again, verifying TLS against that CA")
    second, _ = await until_signed(lambda: fetch(server, ca_pem=info.ca_pem))
    if _kubeconfig(second) != _kubeconfig(first):
        raise JoinError(
            f"the second kubeconfig from the {CLUSTER_INFO} ConfigMap (using validated TLS) "
            "was different from the first"
        )
    say(f"[discovery] The API server's TLS verifies against the pinned CA; using {info.server}")
    return info


async def _until_signed(
    request: Callable[[], Awaitable[Obj]],
    *,
    token: BootstrapToken,
    pins: frozenset[str],
    give_up_after: float,
    interval: float,
    say: Callable[[str], None],
) -> tuple[Obj, ClusterInfo]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_after
    while True:
        try:
            configmap = await request()
            return configmap, verify_cluster_info(configmap, token=token, pins=pins)
        except (ApiError, SignatureMissing) as e:
            last = e
        remaining = deadline - loop.time()
        if remaining <= 0:
            what = "the request failed" if isinstance(last, ApiError) else "no signature"
            raise JoinError(
                f"{last} (discovery gave up after {give_up_after:g}s; {what} each time)"
            ) from None
        say(f"[discovery] Retrying in {min(interval, remaining):g}s: {last}")
        await asyncio.sleep(min(interval, remaining))


def _kubeconfig(configmap: Obj) -> object:
    data = configmap.get("data") or {}
    return data.get(KUBECONFIG_KEY) if isinstance(data, dict) else None

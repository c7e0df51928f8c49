"""The container runtime's health, as the node's Ready condition sees it (kubelet runtime.go).

Every 5 s the manager asks the runtime for ``Status`` over CRI (connecting first, which
negotiates runtime.v1). What it learns becomes error texts for the Ready condition, worded as
the kubelet words them:

- never successfully checked: "container runtime status check may not have completed yet";
- no successful check for 30 s: "container runtime is down";
- ``RuntimeReady`` not true: "container runtime not ready: RuntimeReady=false reason:...";
- ``NetworkReady`` not true: "container runtime network not ready: NetworkReady=false ...";
- runtime.v1 not served: the negotiation error ("validate CRI v1 runtime API for endpoint ...").

The policy is the pure :func:`evaluate`; the manager only collects facts and calls
``on_change`` when the result changes, so the node status is patched promptly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from nodeagent.kuberuntime import CriError, CriVersionError
from nodeagent.kuberuntime.types import RuntimeCondition, StatusResponse, VersionResponse
from nodeagent.log import get_logger

STATUS_PERIOD: Final = 5.0  # the kubelet's updateRuntimeUp period
MAX_WAIT_FOR_RUNTIME: Final = 30.0  # maxWaitForContainerRuntime
NOT_CHECKED: Final = "container runtime status check may not have completed yet"
RUNTIME_DOWN: Final = "container runtime is down"
NETWORK_NOT_READY: Final = "container runtime network not ready"
VERSION_UNKNOWN: Final = "unknown"


class StatusClient(Protocol):
    async def version(self, api_version: str = "v1") -> VersionResponse: ...
    async def status(self, *, verbose: bool = False) -> StatusResponse: ...
    async def close(self) -> None: ...


@dataclass(frozen=True)
class Facts:
    """What one round of checks learnt. Times are event-loop seconds."""

    now: float
    last_ok: float | None  # last time Status said RuntimeReady=true
    conditions: tuple[RuntimeCondition, ...] | None  # from the last Status answer, if any
    negotiation_error: str | None = None


def condition_text(condition: RuntimeCondition | None) -> str:
    """Go's ``%v`` of a kubelet RuntimeCondition: ``Type=bool reason:R message:M``."""
    if condition is None:
        return "<nil>"
    status = "true" if condition.status else "false"
    return f"{condition.type}={status} reason:{condition.reason} message:{condition.message}"


def evaluate(facts: Facts) -> tuple[str, ...]:
    """The runtime and network errors the Ready condition reports (empty: ready)."""
    errors: list[str] = []
    if facts.last_ok is None:
        errors.append(NOT_CHECKED)
    elif facts.now - facts.last_ok >= MAX_WAIT_FOR_RUNTIME:
        errors.append(RUNTIME_DOWN)
    if facts.negotiation_error:
        errors.append(facts.negotiation_error)
    if facts.conditions is not None:
        by_type = {c.type: c for c in facts.conditions}
        runtime = by_type.get("RuntimeReady")
        if runtime is None or not runtime.status:
            errors.append(f"container runtime not ready: {condition_text(runtime)}")
        network = by_type.get("NetworkReady")
        if network is None or not network.status:
            errors.append(f"{NETWORK_NOT_READY}: {condition_text(network)}")
    return tuple(errors)


def version_string(version: VersionResponse | None) -> str:
    """``containerRuntimeVersion`` as the kubelet reports it: ``<name>://<version>``."""
    if version is None or not version.runtime_name:
        return VERSION_UNKNOWN
    return f"{version.runtime_name}://{version.runtime_version}"


class RuntimeState:
    """Manager: keeps :meth:`errors` and :meth:`version` current for the node status."""

    def __init__(
        self,
        *,
        endpoint: str,
        connect: Callable[[str], Awaitable[StatusClient]],
        on_change: Callable[[], None] = lambda: None,
        period: float = STATUS_PERIOD,
    ) -> None:
        self._endpoint = endpoint
        self._connect = connect
        self._on_change = on_change
        self._period = period
        self._log = get_logger("runtime").bind(endpoint=endpoint)
        self._client: StatusClient | None = None
        self._version: VersionResponse | None = None
        self._last_ok: float | None = None
        self._conditions: tuple[RuntimeCondition, ...] | None = None
        self._negotiation_error: str | None = None
        self._errors: tuple[str, ...] = (NOT_CHECKED,)
        self._last_logged = ""
        self._wake: asyncio.Future[None] | None = None

    @property
    def name(self) -> str:
        return "runtime"

    def errors(self) -> tuple[str, ...]:
        return self._errors

    def version(self) -> str:
        return version_string(self._version)

    def network_errors(self) -> tuple[str, ...]:
        """Only the network's errors (the kubelet's ``networkErrors``): pods on the host's
        network may start while they last, the others wait."""
        return tuple(e for e in self._errors if e.startswith(NETWORK_NOT_READY))

    def poke(self) -> None:
        """Check now instead of at the next period (the kubelet's ``updateRuntimeUp`` right after
        a pod CIDR reached the runtime)."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._check()
                self._publish(evaluate(self._facts(loop.time())))
                await self._sleep(loop)
        finally:
            if self._client is not None:
                await asyncio.shield(self._client.close())

    async def _sleep(self, loop: asyncio.AbstractEventLoop) -> None:
        """``asyncio.sleep(period)`` (built the same way, so it wakes in the same order) that
        `poke` can end early."""
        self._wake = wake = loop.create_future()
        timer = loop.call_later(self._period, _wake_up, wake)
        try:
            await wake
        finally:
            timer.cancel()
            self._wake = None

    def _facts(self, now: float) -> Facts:
        return Facts(
            now=now,
            last_ok=self._last_ok,
            conditions=self._conditions,
            negotiation_error=self._negotiation_error,
        )

    async def _check(self) -> None:
        try:
            if self._client is None:
                self._client = await self._connect(self._endpoint)
                self._version = await self._client.version()
                self._negotiation_error = None
                self._log.info("Connected to the container runtime", version=self.version())
            answer = await self._client.status()
        except CriVersionError as e:
            self._negotiation_error = str(e)
            self._conditions = None
            await self._drop_client()
            self._log_once(f"Container runtime does not serve CRI v1: {e}")
            return
        except CriError as e:
            self._conditions = None
            await self._drop_client()
            self._log_once(f"Container runtime sanity check failed: {e}")
            return
        self._conditions = tuple(answer.status.conditions)
        runtime = {c.type: c for c in self._conditions}.get("RuntimeReady")
        if runtime is not None and runtime.status:
            self._last_ok = asyncio.get_running_loop().time()

    async def _drop_client(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _log_once(self, message: str) -> None:
        if message != self._last_logged:
            self._last_logged = message
            self._log.error(message)

    def _publish(self, errors: Sequence[str]) -> None:
        errors = tuple(errors)
        if errors == self._errors:
            return
        self._errors = errors
        if errors:
            self._log.warning("Container runtime not ready", errors="; ".join(errors))
        else:
            self._last_logged = ""
            self._log.info("Container runtime is ready", version=self.version())
        self._on_change()


def _wake_up(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

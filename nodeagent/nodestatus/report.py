"""What the agent believes about its node, kept in ``<rootDir>/node-state.json`` for ``nodeagent
status``: conditions and addresses as last reported, the last status patch, the last Lease
renewal, and the client certificate's validity.

Managers feed it through narrow callbacks (``status_reported``, ``lease_renewed``,
``credentials``); ``run()`` writes the file (atomically, via a thread, at most once a second)
whenever something changed, so readers never see a half-written file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any, Final, Protocol

from nodeagent import __version__
from nodeagent.atomicfile import write_atomic
from nodeagent.clock import Clock
from nodeagent.gotext import rfc3339
from nodeagent.log import Logger, get_logger

STATE_FILE: Final = "node-state.json"
Obj = dict[str, Any]  # not nodeagent.apiserver's: `nodeagent status` must not import the client
MIN_WRITE_INTERVAL: Final = 1.0


class CertFacts(Protocol):
    @property
    def subject(self) -> str: ...
    @property
    def not_before(self) -> dt.datetime: ...
    @property
    def not_after(self) -> dt.datetime: ...


class NodeReport:
    def __init__(
        self, *, path: Path, node_name: str, clock: Clock, log: Logger | None = None
    ) -> None:
        self.path = path
        self._clock = clock
        self._state: dict[str, Any] = {
            "node": node_name,
            "agentVersion": __version__,
            "pid": os.getpid(),
        }
        self._dirty = asyncio.Event()
        self._log = log or get_logger("nodestatus")

    @property
    def name(self) -> str:
        return "nodereport"

    def snapshot(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._state))  # type: ignore[no-any-return]

    # --- callbacks (cheap, synchronous) -------------------------------------------------

    def status_reported(self, node: Obj) -> None:
        status = node.get("status") or {}
        info = status.get("nodeInfo") or {}
        self._update(
            lastStatusReport=rfc3339(self._clock.now()),
            conditions=status.get("conditions") or [],
            addresses=status.get("addresses") or [],
            kubeletVersion=info.get("kubeletVersion", ""),
            containerRuntimeVersion=info.get("containerRuntimeVersion", ""),
            nodeUID=(node.get("metadata") or {}).get("uid", ""),
        )

    def lease_renewed(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        self._update(
            lease={
                "name": f"{(lease.get('metadata') or {}).get('namespace', '')}/"
                f"{(lease.get('metadata') or {}).get('name', '')}",
                "holderIdentity": spec.get("holderIdentity", ""),
                "leaseDurationSeconds": spec.get("leaseDurationSeconds", 0),
                "renewTime": spec.get("renewTime", ""),
            }
        )

    def credentials(self, info: CertFacts | None) -> None:
        self._update(
            credentials=None
            if info is None
            else {
                "subject": info.subject,
                "notBefore": rfc3339(info.not_before),
                "notAfter": rfc3339(info.not_after),
            }
        )

    def _update(self, **fields: Any) -> None:
        self._state.update(fields)
        self._dirty.set()

    # --- writer ---------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.write()
            await asyncio.sleep(MIN_WRITE_INTERVAL)

    async def write(self) -> None:
        self._state["writtenAt"] = rfc3339(self._clock.now())
        text = json.dumps(self._state, indent=2, sort_keys=True) + "\n"
        try:
            await asyncio.to_thread(write_atomic, self.path, text.encode(), mode=0o644)
        except OSError as e:
            self._log.error("Cannot write the node state file", path=str(self.path), error=str(e))

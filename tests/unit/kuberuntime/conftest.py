"""Fixtures for the CRI tests: short socket directories and scripted CRI servers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from scripted_cri import ScriptedCri

from cri_protos.runtime.v1 import api_pb2 as api


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory for unix sockets (sun_path is limited to 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="cri-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _serve(short_tmp: Path, services: tuple[str, ...]) -> AsyncIterator[ScriptedCri]:
    cri = ScriptedCri(short_tmp / "cri.sock", services=services)
    await cri.server.start()
    try:
        yield cri
    finally:
        await cri.server.stop(None)


@pytest.fixture
async def cri_server(short_tmp: Path) -> AsyncIterator[ScriptedCri]:
    """A runtime serving runtime.v1 with Version answered like containerd."""
    async for cri in _serve(short_tmp, ("RuntimeService", "ImageService")):
        cri.handlers["Version"] = lambda _req, _ctx: api.VersionResponse(
            version="0.1.0",
            runtime_name="containerd",
            runtime_version="v2.1.4",
            runtime_api_version="v1",
        )
        yield cri


@pytest.fixture
async def bare_server(short_tmp: Path) -> AsyncIterator[ScriptedCri]:
    """A gRPC server on the socket that serves no CRI service at all."""
    async for cri in _serve(short_tmp, ()):
        yield cri

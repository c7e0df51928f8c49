"""The cgroup driver from the runtime (``RuntimeConfig``), as the kubelet 1.34+ takes it: the
runtime's answer wins over ``kubelet.cgroupDriver``; ``Unimplemented`` keeps the configuration
with the kubelet's log line; other errors are retried twice, 2 s apart."""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import pytest
from scripted_cri import ScriptedCri

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.cgroupdriver import (
    ADOPTED_MESSAGE,
    FALLBACK_MESSAGE,
    FROM_CONFIG_MESSAGE,
    MISMATCH_MESSAGE,
    ResolvedDriver,
    UnknownCgroupDriver,
    driver_from_containerd_config,
    driver_from_runtime_config,
    resolve_cgroup_driver,
)
from nodeagent.kuberuntime.connection import RuntimeConnection
from nodeagent.kuberuntime.env import EnvInputs
from nodeagent.kuberuntime.errors import CriUnavailable, CriUnimplemented
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings, ResolvConf
from nodeagent.log import get_logger
from nodeagent.log.facade import record_fields
from nodeagent.testing.background import running
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import MemoryFiles, pod

LOG = get_logger("kuberuntime")
SYSTEMD, CGROUPFS = 0, 1  # CRI CgroupDriver values


def config_response(driver: int | None) -> cri.RuntimeConfigResponse:
    response = cri.RuntimeConfigResponse()
    if driver is not None:
        # The stubs type the field as the enum class; any int (even unknown) goes on the wire.
        response.linux.cgroup_driver = cast(api.CgroupDriver, driver)
    return response


@pytest.mark.parametrize(
    ("driver", "expected"),
    [(SYSTEMD, "systemd"), (CGROUPFS, "cgroupfs"), (None, None)],
    ids=["systemd", "cgroupfs", "no linux section"],
)
def test_the_runtime_config_names_the_driver(driver: int | None, expected: str | None) -> None:
    assert driver_from_runtime_config(config_response(driver)) == expected


def test_an_unknown_driver_value_is_named() -> None:
    with pytest.raises(UnknownCgroupDriver, match="runtime returned an unknown cgroup driver 7"):
        driver_from_runtime_config(config_response(7))


def containerd_status(config: object) -> cri.StatusResponse:
    """A verbose Status as containerd 1.6 answers it: its CRI plugin config as JSON."""
    text = config if isinstance(config, str) else json.dumps(config)
    return cri.StatusResponse(info={"config": text})


def runc(options: object, *, runtime_type: str = "io.containerd.runc.v2") -> dict[str, Any]:
    return {
        "sandboxImage": "localhost/pause:latest",
        "containerd": {
            "defaultRuntimeName": "runc",
            "runtimes": {"runc": {"runtimeType": runtime_type, "options": options}},
        },
    }


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (runc({"SystemdCgroup": True}), ("systemd", "runc.options.SystemdCgroup=true")),
        (runc({"SystemdCgroup": False}), ("cgroupfs", "runc.options.SystemdCgroup=false")),
        (runc({"BinaryName": "/usr/bin/runc"}), ("cgroupfs", "SystemdCgroup=false")),
        (runc(None), ("cgroupfs", "SystemdCgroup=false")),
        (runc({"SystemdCgroup": True}, runtime_type="io.containerd.kata.v2"), None),
        ({"sandboxImage": "x"}, None),
        ("not json", None),
    ],
    ids=[
        "SystemdCgroup true",
        "SystemdCgroup false",
        "option not set: runc's default",
        "no options section",
        "not runc",
        "no containerd section",
        "not JSON",
    ],
)
def test_containerds_own_configuration_names_the_driver(
    config: object, expected: tuple[str, str] | None
) -> None:
    found = driver_from_containerd_config(containerd_status(config))
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert found.driver == expected[0] and found.evidence.endswith(expected[1])


class Answers:
    """RuntimeConfig answering from a script: a response or an exception per call."""

    def __init__(self, *answers: cri.RuntimeConfigResponse | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.slept: list[float] = []

    async def __call__(self) -> cri.RuntimeConfigResponse:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, Any]]:
    return [
        (r.levelno, r.getMessage(), record_fields(r).get("cgroup_driver")) for r in caplog.records
    ]


async def test_the_runtimes_driver_wins_over_the_configuration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    answers = Answers(config_response(SYSTEMD))
    resolved = await resolve_cgroup_driver(
        answers, configured="cgroupfs", log=LOG, sleep=answers.sleep
    )
    assert (resolved.driver, resolved.source) == ("systemd", "runtime")
    assert (logging.INFO, ADOPTED_MESSAGE, "systemd") in messages(caplog)


async def test_unimplemented_keeps_the_configuration_with_the_kubelets_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    answers = Answers(CriUnimplemented("no", rpc="RuntimeConfig", code="Unimplemented"))
    resolved = await resolve_cgroup_driver(
        answers, configured="systemd", log=LOG, sleep=answers.sleep
    )
    assert (resolved.driver, resolved.source) == ("systemd", "config")
    assert answers.calls == 1 and answers.slept == []
    assert messages(caplog) == [(logging.INFO, FALLBACK_MESSAGE, "systemd")]


async def without_runtime_config(
    status: cri.StatusResponse, *, configured: CgroupDriver
) -> ResolvedDriver:
    """Resolve with a runtime that answers RuntimeConfig Unimplemented and ``status``."""
    answers = Answers(CriUnimplemented("no", rpc="RuntimeConfig", code="Unimplemented"))

    async def verbose_status() -> cri.StatusResponse:
        return status

    return await resolve_cgroup_driver(
        answers, status=verbose_status, configured=configured, log=LOG, sleep=answers.sleep
    )


async def test_without_runtime_config_the_runtimes_own_configuration_decides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    status = containerd_status(runc({"SystemdCgroup": True}))
    resolved = await without_runtime_config(status, configured="cgroupfs")
    assert (resolved.driver, resolved.source) == ("systemd", "runtime-config")
    assert messages(caplog) == [
        (logging.INFO, FROM_CONFIG_MESSAGE, "systemd"),
        (logging.WARNING, MISMATCH_MESSAGE, None),
    ]
    assert record_fields(caplog.records[0])["setting"] == (
        "containerd.runtimes.runc.options.SystemdCgroup=true"
    )
    assert record_fields(caplog.records[1]) == {"configured": "cgroupfs", "runtime": "systemd"}


async def test_a_runtime_that_says_nothing_of_its_driver_keeps_the_configuration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    # e.g. CRI-O before 1.28, or a runtime that is not runc: no config in its Status
    resolved = await without_runtime_config(cri.StatusResponse(), configured="systemd")
    assert (resolved.driver, resolved.source) == ("systemd", "config")
    assert messages(caplog) == [(logging.INFO, FALLBACK_MESSAGE, "systemd")]


async def test_a_runtime_still_starting_is_asked_again_two_seconds_later() -> None:
    unavailable = CriUnavailable("down", rpc="RuntimeConfig", code="Unavailable")
    answers = Answers(unavailable, unavailable, config_response(CGROUPFS))
    resolved = await resolve_cgroup_driver(
        answers, configured="systemd", log=LOG, sleep=answers.sleep
    )
    assert (resolved.driver, resolved.source) == ("cgroupfs", "runtime")
    assert answers.slept == [2.0, 2.0]


async def test_three_failures_keep_the_configuration_and_say_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    down = CriUnavailable("down", rpc="RuntimeConfig", code="Unavailable", details="eof")
    answers = Answers(down, down, down)
    resolved = await resolve_cgroup_driver(
        answers, configured="cgroupfs", log=LOG, sleep=answers.sleep
    )
    assert (resolved.driver, resolved.source) == ("cgroupfs", "config")
    assert answers.calls == 3 and answers.slept == [2.0, 2.0]
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record_fields(error)["error"] == "rpc error: code = Unavailable desc = eof"


async def test_an_unknown_driver_keeps_the_configuration_and_names_the_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    answers = Answers(config_response(5))
    resolved = await resolve_cgroup_driver(
        answers, configured="cgroupfs", log=LOG, sleep=answers.sleep
    )
    assert (resolved.driver, resolved.source) == ("cgroupfs", "config")
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record_fields(error)["error"] == "runtime returned an unknown cgroup driver 5"


# Through the real gRPC client: the connection asks once, right after Version.


def serve_version(cri_server: ScriptedCri) -> None:
    cri_server.handlers["Version"] = lambda _req, _ctx: api.VersionResponse(
        version="0.1.0",
        runtime_name="containerd",
        runtime_version="v2.1.4",
        runtime_api_version="v1",
    )


def connected(endpoint: str, configured: CgroupDriver) -> AbstractAsyncContextManager[Any]:
    return running(RuntimeConnection(endpoint=endpoint, cgroup_driver=configured))


async def test_the_connection_adopts_the_driver_the_runtime_answers(
    cri_server: ScriptedCri,
) -> None:
    serve_version(cri_server)
    cri_server.handlers["RuntimeConfig"] = lambda _req, _ctx: api.RuntimeConfigResponse(
        linux=api.LinuxRuntimeConfiguration(cgroup_driver=api.SYSTEMD)
    )
    async with connected(cri_server.endpoint, "cgroupfs") as connection:
        assert await asyncio.wait_for(connection.cgroup_driver(), 5) == "systemd"
    assert len(cri_server.requests["RuntimeConfig"]) == 1


async def test_the_connection_reads_containerd_16s_configuration(
    cri_server: ScriptedCri,
) -> None:
    serve_version(cri_server)  # RuntimeConfig unscripted: UNIMPLEMENTED, as containerd 1.6
    cri_server.handlers["Status"] = lambda req, _ctx: api.StatusResponse(
        info={"config": json.dumps(runc({"SystemdCgroup": True}))} if req.verbose else {}
    )
    async with connected(cri_server.endpoint, "cgroupfs") as connection:
        assert await asyncio.wait_for(connection.cgroup_driver(), 5) == "systemd"
    assert [r.verbose for r in cri_server.requests["Status"]] == [True]


async def test_the_connection_keeps_the_configured_driver_when_unimplemented(
    cri_server: ScriptedCri,
) -> None:
    serve_version(cri_server)  # RuntimeConfig unscripted: the server answers UNIMPLEMENTED
    async with connected(cri_server.endpoint, "systemd") as connection:
        assert await asyncio.wait_for(connection.cgroup_driver(), 5) == "systemd"
    assert len(cri_server.requests["RuntimeConfig"]) == 1


# The pod's cgroup parent follows the resolved driver.


@pytest.mark.parametrize(
    ("answer", "expected_prefix"),
    [
        (SYSTEMD, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"),
        (CGROUPFS, "/kubepods/besteffort/pod"),
    ],
    ids=["runtime says systemd", "runtime says cgroupfs"],
)
async def test_a_sandbox_gets_the_cgroup_parent_of_the_runtimes_driver(
    answer: int, expected_prefix: str
) -> None:
    runtime = FakeRuntime(clock=LoopClock())
    runtime.cgroup_driver = answer

    async def open_fake(_endpoint: str) -> Any:  # a FakeRuntime stands in for the CriClient
        return runtime

    configured: CgroupDriver = "cgroupfs" if answer == SYSTEMD else "systemd"
    connection = RuntimeConnection(
        endpoint="unix:///fake", opener=open_fake, cgroup_driver=configured
    )
    manager = RuntimeManager(
        runtime=connection,
        images=connection,
        settings=PodRuntimeSettings(node_name="node-a", cgroup_driver=configured),
        clock=LoopClock(),
        files=MemoryFiles(),
        cgroup_driver=connection.cgroup_driver,
    )
    async with running(connection):
        p = pod("web")
        state = await manager.pod_state(p.uid)
        await manager.sync_pod(p, state, inputs=EnvInputs(), host_dns=ResolvConf())
    [sandbox_id] = runtime.sandbox_ids
    parent = runtime.sandbox_config(sandbox_id).linux.cgroup_parent
    assert parent.startswith(expected_prefix)
    assert manager.settings.cgroup_driver == ("systemd" if answer == SYSTEMD else "cgroupfs")

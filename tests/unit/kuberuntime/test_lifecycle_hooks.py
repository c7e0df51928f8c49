"""Lifecycle hooks and termination messages: the kubelet's messages and grace arithmetic (pure),
and the runtime manager running them over ``FakeRuntime`` in virtual time (``looptime``)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.env import EnvInputs
from nodeagent.kuberuntime.errors import CriUnknown
from nodeagent.kuberuntime.hooks import (
    HookError,
    HookRunner,
    HttpTarget,
    exec_error,
    exec_failure_message,
    go_dial_error,
    grace_after_pre_stop,
    http_request_bytes,
    http_target,
    resolve_port,
    stop_grace,
)
from nodeagent.kuberuntime.labels import TERMINATION_MESSAGE_PATH, TERMINATION_MESSAGE_POLICY
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.results import PodEvent, SyncResult
from nodeagent.kuberuntime.termination import (
    log_tail_message,
    message_source,
    termination_message_file,
    with_message,
)
from nodeagent.podspec import HTTPGetAction, Pod
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, container, pod

SETTINGS = PodRuntimeSettings(
    node_name="node-a", root_dir="/var/lib/nodeagent", pod_logs_dir="/var/log/pods"
)


# --- pure ------------------------------------------------------------------------------


def test_exec_failure_message_is_the_kubelets() -> None:
    p = pod("web", uid="u-1", containers=[container("app")])
    command = ("sh", "-c", "echo oops; exit 3")
    error = exec_error(command, 3, "")
    assert exec_failure_message(p, p.spec.containers[0], command, error, "oops\n") == (
        'Exec lifecycle hook ([sh -c echo oops; exit 3]) for Container "app" in Pod '
        "\"web_default(u-1)\" failed - error: command 'sh -c echo oops; exit 3' exited with 3: "
        ', message: "oops\\n"'
    )


def test_exec_failure_message_quotes_invalid_utf8_output_byte_by_byte() -> None:
    """Go quotes ``string(output)``: each byte of invalid UTF-8 is ``\\xNN``, not U+FFFD."""
    p = pod("web", uid="u-1", containers=[container("app")])
    message = exec_failure_message(p, p.spec.containers[0], ("cat",), "boom", b"caf\xc3\xa9 \xff\n")
    assert message.endswith(', message: "caf\u00e9 \\xff\\n"')


@pytest.mark.parametrize(
    ("grace", "took", "left"),
    [(30, 3.9, 27), (30, 0.4, 30), (5, 5.0, 0), (5, 7.2, -2)],
)
def test_pre_stop_time_is_taken_from_the_grace_in_whole_seconds(
    grace: int, took: float, left: int
) -> None:
    assert grace_after_pre_stop(grace, took) == left


def test_stop_container_gets_at_least_two_seconds_unless_overridden() -> None:
    assert stop_grace(27) == 27
    assert stop_grace(0) == 2
    assert stop_grace(-2) == 2
    assert stop_grace(-2, override=0) == 0


def test_http_hook_targets_the_pod_ip_and_named_ports() -> None:
    app = pod(containers=[container("app", ports=[{"name": "web", "containerPort": 8080}])])
    c = app.spec.containers[0]
    target = http_target(HTTPGetAction(port="web", path="hook"), c, "10.1.0.5")
    assert target.url == "http://10.1.0.5:8080/hook"
    v6 = http_target(HTTPGetAction(port=81, scheme="HTTPS", host="fd00::5"), c, "10.1.0.5")
    assert v6.url == "https://[fd00::5]:81/"
    assert resolve_port("9090", c) == 9090
    with pytest.raises(HookError, match="couldn't find port: nope"):
        resolve_port("nope", c)
    with pytest.raises(HookError, match="failed to find networking container"):
        http_target(HTTPGetAction(port=80), c, "")


def test_http_request_carries_the_headers_and_the_lifecycle_user_agent() -> None:
    target = HttpTarget("http", "10.1.0.5", 80, "/x", (("X-Token", "t"),))
    request = http_request_bytes(target).decode()
    assert request.startswith("GET /x HTTP/1.1\r\nHost: 10.1.0.5:80\r\n")
    assert "User-Agent: kube-lifecycle/" in request
    assert "X-Token: t\r\n" in request
    assert request.endswith("\r\n\r\n")


def test_dial_errors_read_as_gos() -> None:
    target = HttpTarget("http", "10.1.0.5", 8089, "/hook", ())
    assert go_dial_error(target, ConnectionRefusedError(111, "Connection refused")) == (
        'Get "http://10.1.0.5:8089/hook": dial tcp 10.1.0.5:8089: connect: connection refused'
    )


def test_termination_message_file_is_mounted_at_the_path() -> None:
    p = pod("web", uid="u-1", containers=[container("app", terminationMessagePath="/tmp/m")])
    found = termination_message_file(SETTINGS, p, p.spec.containers[0], "abcd1234")
    assert found is not None
    assert found.host_path == "/var/lib/nodeagent/pods/u-1/containers/app/abcd1234"
    assert (found.mount.container_path, found.mount.host_path) == ("/tmp/m", found.host_path)
    none = pod(containers=[container("app", terminationMessagePath="")])
    assert termination_message_file(SETTINGS, none, none.spec.containers[0], "x") is None


def _status(*, exit_code: int, policy: str = "File", reason: str = "") -> cri.ContainerStatus:
    return cri.ContainerStatus(
        id="c1",
        exit_code=exit_code,
        reason=reason,
        annotations={
            TERMINATION_MESSAGE_PATH: "/dev/termination-log",
            TERMINATION_MESSAGE_POLICY: policy,
        },
        mounts=[cri.Mount(container_path="/dev/termination-log", host_path="/h/m")],
        log_path="/var/log/pods/x/app/0.log",
    )


def test_fallback_to_logs_only_on_error_and_not_when_it_could_not_run() -> None:
    fallback = "FallbackToLogsOnError"
    assert message_source(_status(exit_code=1, policy=fallback)).fallback_to_logs
    assert not message_source(_status(exit_code=0, policy=fallback)).fallback_to_logs
    assert not message_source(_status(exit_code=1)).fallback_to_logs
    cannot = _status(exit_code=128, policy=fallback, reason="ContainerCannotRun")
    assert not message_source(cannot).fallback_to_logs
    assert message_source(_status(exit_code=1)).host_path == "/h/m"


def test_log_tail_is_the_last_80_lines_and_2048_bytes_of_content() -> None:
    lines = [f"2026-01-01T00:00:00Z stdout F line {i}".encode() for i in range(100)]
    tail = log_tail_message(b"\n".join(lines) + b"\n")
    assert tail.splitlines()[0] == "line 20"
    assert tail.endswith("line 99\n")
    partial = b"t stdout P abc\nt stdout F def\nt stderr F ghi\n"
    assert log_tail_message(partial) == "abcdef\nghi\n"
    big = b"t stdout F " + b"x" * 5000 + b"\n"
    assert len(log_tail_message(big)) == 2048


def test_message_enriches_the_runtimes_own() -> None:
    assert with_message("", "bye") == "bye"
    assert with_message("OOM", "bye") == "OOM: bye"
    assert with_message("OOM", "") == "OOM"


# --- the runtime manager ---------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[PodEvent] = []

    def __call__(self, event: PodEvent) -> None:
        self.events.append(event)

    def reasons(self) -> list[tuple[str, str, str]]:
        return [(e.reason, e.message, e.container) for e in self.events]


def make(
    exec_handler: Any = None, *, files: MemoryFiles | None = None
) -> tuple[FakeRuntime, RuntimeManager, MemoryFiles]:
    clock = LoopClock()
    runtime = FakeRuntime(clock=clock, exec_handler=exec_handler)
    runtime.add_image(BUSYBOX)
    files = files or MemoryFiles()
    manager = RuntimeManager(
        runtime=runtime,
        images=runtime,
        settings=SETTINGS,
        clock=clock,
        files=files,
        hooks=HookRunner(runtime=runtime),
    )
    return runtime, manager, files


async def sync(manager: RuntimeManager, p: Pod, recorder: Recorder | None = None) -> Any:
    state = await manager.pod_state(p.uid)
    return await manager.sync_pod(
        p,
        state,
        inputs=EnvInputs(host_ips=("192.0.2.10",)),
        host_dns=ResolvConf(),
        on_event=recorder,
    )


@pytest.mark.looptime
async def test_failed_post_start_kills_the_container_and_records_the_kubelets_event() -> None:
    runtime, manager, _ = make(
        lambda _cid, _cmd: cri.ExecSyncResponse(exit_code=3, stdout=b"oops\n")
    )
    hook = {"exec": {"command": ["sh", "-c", "exit 3"]}}
    p = pod("web", uid="u-1", containers=[container("app", lifecycle={"postStart": hook})])
    recorder = Recorder()
    result = await sync(manager, p, recorder)
    assert recorder.reasons()[-3:] == [
        ("Started", "Container started", "app"),
        ("FailedPostStartHook", "PostStartHook failed", "app"),
        ("Killing", "FailedPostStartHook", "app"),
    ]
    failure = result.failures["app"]
    assert failure.reason == "PostStartHookError"
    assert failure.message.startswith("Exec lifecycle hook ([sh -c exit 3]) for Container")
    assert result.started == []
    state = await manager.pod_state(p.uid)
    [record] = state.containers
    assert record.state.value == "exited"
    assert runtime.grace_periods[record.id] == 30


@pytest.mark.looptime
async def test_pre_stop_runs_before_stop_and_its_time_comes_off_the_grace() -> None:
    calls: list[str] = []
    runtime, manager, _ = make(
        lambda _cid, cmd: calls.append(" ".join(cmd)) or cri.ExecSyncResponse()
    )
    p = pod(
        "web",
        uid="u-1",
        grace=10,
        containers=[
            container("slow", lifecycle={"preStop": {"sleep": {"seconds": 4}}}),
            container("quick", lifecycle={"preStop": {"exec": {"command": ["drain"]}}}),
            container("bare"),
        ],
    )
    await sync(manager, p)
    state = await manager.pod_state(p.uid)
    ids = {c.name: c.id for c in state.containers}
    loop = asyncio.get_running_loop()
    started = loop.time()
    await manager.kill_pod(p, state, grace=10)
    assert loop.time() - started == pytest.approx(4, abs=0.01)
    assert calls == ["drain"]
    assert runtime.grace_periods == {ids["slow"]: 6, ids["quick"]: 10, ids["bare"]: 10}


@pytest.mark.looptime
async def test_a_pre_stop_longer_than_the_grace_is_cut_and_stop_gets_the_minimum() -> None:
    runtime, manager, _ = make()
    p = pod(
        "web",
        uid="u-1",
        grace=3,
        containers=[container("app", lifecycle={"preStop": {"sleep": {"seconds": 60}}})],
    )
    await sync(manager, p)
    state = await manager.pod_state(p.uid)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await manager.kill_pod(p, state, grace=3)
    assert loop.time() - started == pytest.approx(3, abs=0.01)
    assert list(runtime.grace_periods.values()) == [2]


@pytest.mark.looptime
async def test_a_failed_pre_stop_records_its_event_and_the_container_still_stops() -> None:
    runtime, manager, _ = make()
    runtime.inject_error(
        "ExecSync", CriUnknown("ExecSync failed", rpc="ExecSync", details="no shell")
    )
    hook = {"exec": {"command": ["drain"]}}
    p = pod("web", uid="u-1", containers=[container("app", lifecycle={"preStop": hook})])
    await sync(manager, p)
    recorder = Recorder()
    await manager.kill_pod(
        p, await manager.pod_state(p.uid), grace=30, result=SyncResult(on_event=recorder)
    )
    assert recorder.reasons() == [
        ("Killing", "Stopping container app", "app"),
        ("FailedPreStopHook", "PreStopHook failed", "app"),
    ]
    [record] = (await manager.pod_state(p.uid)).containers
    assert record.state.value == "exited"


@pytest.mark.looptime
async def test_the_termination_message_file_is_created_and_read_back_on_exit() -> None:
    runtime, manager, files = make()
    p = pod(
        "web",
        uid="u-1",
        restart_policy="Never",
        containers=[
            container("file"),
            container("logs", terminationMessagePolicy="FallbackToLogsOnError"),
        ],
    )
    await sync(manager, p)
    [path_file] = [f for f in files.files if "/containers/file/" in f]
    assert files.modes[path_file] == 0o666
    assert path_file.startswith("/var/lib/nodeagent/pods/u-1/containers/file/")
    files.files[path_file] = b"x" * 5000 + b"done"
    state = await manager.pod_state(p.uid)
    ids = {c.name: c.id for c in state.containers}
    status = (await runtime.container_status(ids["logs"])).status
    files.files[status.log_path] = b"t stdout F first\nt stdout F last words\n"
    runtime.exit_container(ids["file"], exit_code=0)
    runtime.exit_container(ids["logs"], exit_code=1)
    state = await manager.pod_state(p.uid)
    messages = {c.name: c.message for c in state.containers}
    assert len(messages["file"]) == 4096 and messages["file"].endswith("done")
    assert messages["logs"] == "first\nlast words\n"
    await manager.remove_pod(state)
    assert not any(f.startswith("/var/lib/nodeagent/pods/u-1/") for f in files.files)


async def test_http_hook_gets_the_path_from_the_pod_ip_whatever_the_status() -> None:
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    hook = {
        "httpGet": {
            "path": "/drain",
            "port": "admin",
            "httpHeaders": [{"name": "X-A", "value": "1"}],
        }
    }
    p = pod(
        "web",
        uid="u-1",
        containers=[
            container(
                "app", ports=[{"name": "admin", "containerPort": port}], lifecycle={"preStop": hook}
            )
        ],
    )
    c = p.spec.containers[0]
    runner = HookRunner(runtime=FakeRuntime())
    assert c.lifecycle is not None and c.lifecycle.pre_stop is not None
    try:
        ok = await runner.run(p, c, "cid", c.lifecycle.pre_stop, pod_ips=("127.0.0.1",))
    finally:
        server.close()
        await server.wait_closed()
    assert ok is None  # the kubelet does not look at the status code
    assert requests[0].startswith(b"GET /drain HTTP/1.1\r\n")
    assert b"X-A: 1\r\n" in requests[0]
    refused = await runner.run(p, c, "cid", c.lifecycle.pre_stop, pod_ips=("127.0.0.1",))
    assert refused == (
        f'HTTP lifecycle hook (/drain) for Container "app" in Pod "web_default(u-1)" failed - '
        f'error: Get "http://127.0.0.1:{port}/drain": dial tcp 127.0.0.1:{port}: connect: '
        "connection refused"
    )


async def test_tcp_socket_is_not_a_lifecycle_handler() -> None:
    p = pod(containers=[container("app", lifecycle={"postStart": {"tcpSocket": {"port": 80}}})])
    c = p.spec.containers[0]
    assert c.lifecycle is not None and c.lifecycle.post_start is not None
    message = await HookRunner(runtime=FakeRuntime()).run(p, c, "cid", c.lifecycle.post_start)
    assert message is not None and message.startswith("Cannot run handler: invalid handler")


async def test_https_hook_answered_in_plain_http_is_retried_over_http_with_a_warning() -> None:
    sent: list[HttpTarget] = []

    async def http(target: HttpTarget) -> None:
        sent.append(target)
        if target.scheme == "https":
            raise ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")

    headers = [{"name": "Authorization", "value": "Bearer x"}, {"name": "X-A", "value": "1"}]
    hook = {"httpGet": {"path": "/h", "port": 8443, "scheme": "HTTPS", "httpHeaders": headers}}
    p = pod(containers=[container("app", lifecycle={"postStart": hook})])
    c = p.spec.containers[0]
    assert c.lifecycle is not None and c.lifecycle.post_start is not None
    warnings: list[str] = []
    runner = HookRunner(runtime=FakeRuntime(), http=http)
    ok = await runner.run(
        p, c, "cid", c.lifecycle.post_start, pod_ips=("10.1.0.5",), on_fallback=warnings.append
    )
    assert ok is None
    assert [t.scheme for t in sent] == ["https", "http"]
    assert sent[1].headers == (("X-A", "1"),)
    assert warnings == [
        "request to HTTPS lifecycle hook 10.1.0.5:8443 got HTTP response, retry with HTTP succeeded"
    ]


@pytest.mark.looptime
async def test_a_container_whose_pod_is_gone_still_runs_its_pre_stop_hook() -> None:
    calls: list[tuple[str, ...]] = []
    _, manager, _ = make(lambda _cid, cmd: calls.append(tuple(cmd)) or cri.ExecSyncResponse())
    hook = {"exec": {"command": ["drain", "--now"]}}
    p = pod(
        "web",
        uid="u-1",
        containers=[container("app", lifecycle={"preStop": hook}), container("bare")],
    )
    await sync(manager, p)
    state = await manager.pod_state(p.uid)
    restored = {c.name: c.restored for c in state.containers}
    assert restored["bare"] is None
    assert restored["app"] is not None
    restored_pod, restored_container = restored["app"]
    assert (restored_pod.name, restored_pod.uid, restored_container.name) == ("web", "u-1", "app")
    await manager.kill_pod(None, state, grace=30)
    assert calls == [("drain", "--now")]
    assert all(c.state.value == "exited" for c in (await manager.pod_state(p.uid)).containers)


async def test_an_http_hook_to_a_host_that_cannot_be_resolved_fails_with_a_message() -> None:
    hook = {"httpGet": {"path": "/h", "port": 80, "host": "a" * 70 + ".invalid"}}
    p = pod(containers=[container("app", lifecycle={"postStart": hook})])
    c = p.spec.containers[0]
    assert c.lifecycle is not None and c.lifecycle.post_start is not None
    message = await HookRunner(runtime=FakeRuntime()).run(p, c, "cid", c.lifecycle.post_start)
    assert message is not None and message.startswith("HTTP lifecycle hook (/h) for Container")

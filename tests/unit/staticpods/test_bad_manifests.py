"""One malformed manifest is an error naming its file and field, never a crash."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest
from bounded import call_budget

from nodeagent.log.facade import record_fields
from nodeagent.staticpods import DirectoryReader, FileSource, ManifestError
from nodeagent.staticpods.limits import MAX_ALIAS_NODES, MAX_DEPTH, MAX_MANIFEST_BYTES
from nodeagent.staticpods.source import Decoded, decode_file
from nodeagent.testing.background import running
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_manifests import DIRECTORY, MemoryManifests

PATH = "/etc/kubernetes/manifests/bad.yaml"
NODE = "node-a"
# Under 400 Python calls per malformed manifest today (libyaml parses); 25x is unbounded work.
CALLS = 10_000


def pod_yaml(*, meta: str = "", spec: str = "", container: str = "", name: str = "web") -> str:
    return (
        "apiVersion: v1\nkind: Pod\n"
        f"metadata:\n  name: {name}\n{meta}"
        f"spec:\n{spec}  containers:\n  - name: app\n    image: busybox\n{container}"
    )


def error_of(text: str | bytes) -> ManifestError:
    data = text.encode() if isinstance(text, str) else text
    result = decode_file(data, PATH, NODE)
    assert isinstance(result, ManifestError), result
    return result


BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(7)
    )
    + "apiVersion: v1\nkind: Pod\nmetadata: {name: web, annotations: {x: *h}}\n"
    + "spec: {containers: [{name: app, image: busybox}]}\n"
)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        pytest.param(
            pod_yaml(meta="  annotations: [a, b]\n"),
            "metadata.annotations",
            "Expected `object`, got `array`",
            id="annotations that are a list",
        ),
        pytest.param(
            pod_yaml(spec="  tolerations: 7\n"),
            "spec.tolerations",
            "Expected `array`, got `int`",
            id="tolerations that are a scalar",
        ),
        pytest.param(
            pod_yaml(spec="  initContainers: busybox\n"),
            "spec.initContainers",
            'Invalid value: "busybox": must be a list',
            id="initContainers that are a scalar",
        ),
        pytest.param(
            pod_yaml(spec="  priorityClassName: [a]\n"),
            "spec.priorityClassName",
            "Expected `str`, got `array`",
            id="priorityClassName that is a list",
        ),
        pytest.param(
            pod_yaml(meta="  labels: {1: x}\n"),
            "metadata.labels",
            "keys must be strings, found 1",
            id="a key that is not a string",
        ),
        pytest.param(
            pod_yaml(container="    resources: {limits: {memory: 1Gi2}}\n"),
            "spec.containers[0].resources.limits.memory",
            'Invalid value: "1Gi2": quantities must match the regular expression '
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            id="a quantity with trailing digits",
        ),
        pytest.param(
            pod_yaml(container="    resources: {requests: {cpu: 1e100000000}}\n"),
            "spec.containers[0].resources.requests.cpu",
            'Invalid value: "1e100000000": quantities must match the regular expression '
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            id="an absurd quantity",
        ),
        pytest.param(
            pod_yaml(name="w" * 300),
            "metadata.name",
            "must be no more than 253 characters",
            id="a name of 300 characters",
        ),
        pytest.param(
            pod_yaml().replace("name: app", "name: " + "c" * 64),
            "spec.containers[0].name",
            "must be no more than 63 characters",
            id="a container name of 64 characters",
        ),
        pytest.param(
            pod_yaml().replace("name: app", "name: ../../../../etc/cron.d/x"),
            "spec.containers[0].name",
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters",
            id="a container name that climbs out of the log directory",
        ),
        pytest.param(
            pod_yaml(container="    ports: [{containerPort: 80, hostIP: not-an-ip}]\n"),
            "spec.containers[0].ports[0].hostIP",
            'Invalid value: "not-an-ip": must be a valid IP address',
            id="a hostIP that is not an IP",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: &m {name: web, labels: *m}\n",
            "",
            "recursive alias *m",
            id="a recursive alias",
        ),
        pytest.param(
            "a: " + "[" * 600 + "]" * 600 + "\n",
            "",
            f"nested more than {MAX_DEPTH} levels deep",
            id="nesting 600 deep",
        ),
        pytest.param(
            BILLION_LAUGHS,
            "",
            f"aliases expand to more than {MAX_ALIAS_NODES} nodes",
            id="billion laughs",
        ),
        pytest.param(
            pod_yaml(meta="  annotations: {a: !!binary aGVsbG8=}\n"),
            "metadata.annotations.a",
            "a bytes value cannot be part of a pod",
            id="a binary value",
        ),
        pytest.param(
            b"\xff\xfe\x00garbage: [",
            "",
            "not valid YAML or JSON",
            id="bytes that are not text",
        ),
    ],
)
def test_a_malformed_manifest_is_an_error_naming_the_field(
    text: str | bytes, field: str, message: str
) -> None:
    with call_budget(CALLS):  # counted work, not wall time
        error = error_of(text)
    assert error.path == PATH
    assert error.field == field
    assert message in error.message


def test_a_manifest_over_the_size_cap_is_refused_without_being_parsed() -> None:
    error = error_of(pod_yaml() + "#" * MAX_MANIFEST_BYTES)
    assert error.message == (
        f"larger than {MAX_MANIFEST_BYTES} bytes; static pod manifests are capped"
    )


async def test_the_reader_reads_at_most_one_byte_past_the_cap(tmp_path: Path) -> None:
    (tmp_path / "big.yaml").touch()
    os.truncate(tmp_path / "big.yaml", 300 * 1024 * 1024)  # sparse: 300 MB at no cost
    listing = await DirectoryReader().read(str(tmp_path))
    [file] = listing.files
    assert len(file.data) == MAX_MANIFEST_BYTES + 1
    assert file.stamp is not None and file.stamp[2] == 300 * 1024 * 1024


@pytest.mark.looptime
async def test_one_bad_manifest_leaves_the_good_one_running_and_is_logged_with_file_and_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    manifests = MemoryManifests()
    manifests.write("bad.yaml", pod_yaml(name="bad", meta="  annotations: [a]\n"))
    manifests.write("good.yaml", pod_yaml(name="good"))
    source = FileSource(path=DIRECTORY, node_name=NODE, clock=LoopClock(), reader=manifests)
    caplog.set_level(logging.INFO, logger="nodeagent.staticpods")
    async with running(source):
        await source.wait_synced()
        assert [p["metadata"]["name"] for p in source.items()] == ["good-node-a"]
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.getMessage() == "Invalid static pod manifest; ignoring it"
    fields = record_fields(error)
    assert fields["path"] == f"{DIRECTORY}/bad.yaml"
    assert fields["field"] == "metadata.annotations"


@pytest.mark.looptime
async def test_an_unexpected_exception_in_one_manifest_stays_with_that_file(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def flaky(data: bytes, path: str, node_name: str) -> Decoded:
        if path.endswith("bad.yaml"):
            raise TypeError("'list' object is not a mapping")
        return decode_file(data, path, node_name)

    manifests = MemoryManifests()
    manifests.write("bad.yaml", pod_yaml(name="bad"))
    manifests.write("good.yaml", pod_yaml(name="good"))
    source = FileSource(
        path=DIRECTORY, node_name=NODE, clock=LoopClock(), reader=manifests, decode=flaky
    )
    caplog.set_level(logging.INFO, logger="nodeagent.staticpods")
    async with running(source):
        await source.wait_synced()
        assert [p["metadata"]["name"] for p in source.items()] == ["good-node-a"]
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record_fields(error)["error"] == (
        "cannot be read as a pod: TypeError: 'list' object is not a mapping"
    )


async def test_an_unchanged_file_is_not_parsed_again(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text(pod_yaml())
    parsed: list[str] = []

    def counting(data: bytes, path: str, node_name: str) -> Decoded:
        parsed.append(path)
        return decode_file(data, path, node_name)

    source = FileSource(path=str(tmp_path), node_name=NODE, clock=LoopClock(), decode=counting)
    await source.scan_once()
    await source.scan_once()
    assert parsed == [str(tmp_path / "web.yaml")]
    (tmp_path / "web.yaml").write_text(pod_yaml(name="web2"))
    os.utime(tmp_path / "web.yaml", ns=(1, 1))  # a new mtime even on coarse clocks
    await source.scan_once()
    assert len(parsed) == 2
    assert [p["metadata"]["name"] for p in source.items()] == ["web2-node-a"]


async def test_parsing_a_big_manifest_happens_off_the_event_loop(tmp_path: Path) -> None:
    env = "".join(f"      - {{name: V{i}, value: '{'x' * 20}'}}\n" for i in range(25_000))
    text = pod_yaml(container="    env:\n" + env)
    assert len(text) < MAX_MANIFEST_BYTES
    (tmp_path / "big.yaml").write_text(text)
    parsing = threading.Event()
    threads: list[int] = []

    def decode(data: bytes, path: str, node_name: str) -> Decoded:
        threads.append(threading.get_ident())
        parsing.set()
        try:
            return decode_file(data, path, node_name)
        finally:
            parsing.clear()

    source = FileSource(path=str(tmp_path), node_name=NODE, clock=LoopClock(), decode=decode)
    ticks_while_parsing = 0

    async def ticker() -> None:
        nonlocal ticks_while_parsing
        while True:
            await asyncio.sleep(0.01)
            ticks_while_parsing += parsing.is_set()

    tick = asyncio.create_task(ticker())
    await source.scan_once()
    tick.cancel()
    assert [p["metadata"]["name"] for p in source.items()] == ["web-node-a"]
    assert threads and threads[0] != threading.get_ident()
    assert ticks_while_parsing >= 3  # the loop kept running while the file was parsed

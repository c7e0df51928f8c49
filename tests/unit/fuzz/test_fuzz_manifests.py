"""Bounded fuzzing of static pod manifests and pod specs.

Every generated manifest either becomes a pod or is a :class:`ManifestError` naming the file
(and, when the problem is in a field, that field's path): never another exception, never more
than a bounded number of Python calls per input (counted, not timed).
Generators: random text of YAML punctuation, a valid pod with one field
replaced by a hostile value (wrong types, absurd quantities, long names, deep nesting, aliases),
and random JSON structures as pod specs for :func:`decode_checked_pod`. Then the file source,
fed a directory of one generated bad manifest and one good one, yields the good one. The seed
is fixed (``derandomize``); ``NODEAGENT_FUZZ_EXAMPLES`` raises the example count by hand.
"""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any

import msgspec
import yaml
from bounded import call_budget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.podspec import Pod, PodSpecError, decode_checked_pod
from nodeagent.staticpods import FileSource, ManifestError
from nodeagent.staticpods.source import decode_file
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_manifests import DIRECTORY, MemoryManifests

EXAMPLES = int(os.environ.get("NODEAGENT_FUZZ_EXAMPLES", "200"))
SETTINGS = settings(
    derandomize=True,
    max_examples=EXAMPLES,
    deadline=None,  # the work is counted below, never timed
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
PATH = f"{DIRECTORY}/bad.yaml"
NODE = "node-a"
# At most about 27 000 Python calls per generated input today; 10x that is unbounded work.
CALLS = 300_000

GOOD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "kube-system", "labels": {"app": "web"}},
    "spec": {
        "priorityClassName": "system-node-critical",
        "tolerations": [{"operator": "Exists"}],
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [
            {
                "name": "app",
                "image": "busybox",
                "ports": [{"containerPort": 80, "hostIP": "127.0.0.1"}],
                "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}},
                "env": [
                    {
                        "name": "MEM",
                        "valueFrom": {
                            "resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}
                        },
                    }
                ],
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            }
        ],
    },
}
FIELDS: list[tuple[str | int, ...]] = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec",),
    ("spec", "priorityClassName"),
    ("spec", "priority"),
    ("spec", "tolerations"),
    ("spec", "initContainers"),
    ("spec", "containers"),
    ("spec", "restartPolicy"),
    ("spec", "overhead"),
    ("spec", "securityContext"),
    ("spec", "containers", 0, "name"),
    ("spec", "containers", 0, "image"),
    ("spec", "containers", 0, "ports", 0, "hostIP"),
    ("spec", "containers", 0, "ports", 0, "containerPort"),
    ("spec", "containers", 0, "resources", "limits", "memory"),
    ("spec", "containers", 0, "resources", "limits"),
    ("spec", "containers", 0, "env", 0, "valueFrom", "resourceFieldRef", "divisor"),
    ("spec", "containers", 0, "securityContext", "seccompProfile"),
    ("spec", "containers", 0, "securityContext", "seccompProfile", "type"),
    ("spec", "initContainers", 0, "name"),
]
HOSTILE_SCALARS: list[Any] = [
    "1Gi2", "1e100000000", "1e-100000000", "9" * 500, "-1", "0.0", "NaN", "", " ", "..",
    "../../../../etc/cron.d/x", "a/b", "A" * 300, "w" * 254, "c" * 64, "not-an-ip", "é" * 80,
    "Localhost", "RuntimeDefault", "\x00", "\u2028", 0, -1, 2**70, 1.5, float("inf"), True,
    None, [], {}, ["a", "b"], {"1": 2}, [[[]]],
]  # fmt: skip
PUNCTUATION = ":-[]{}&*!|>'\"%@`#,?\n\t \x00\x01\x7fa1é"

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=20)
    | st.sampled_from(HOSTILE_SCALARS),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


def replaced(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


def as_yaml(doc: dict[str, Any]) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode()


@st.composite
def yaml_amplifiers(draw: st.DrawFn) -> bytes:
    """Documents built to cost: deep nesting, alias fan-out, recursive aliases, huge numbers."""
    kind = draw(st.sampled_from(["deep", "laughs", "recursive", "merge", "number"]))
    n = draw(st.integers(min_value=1, max_value=12))
    if kind == "deep":
        depth = draw(st.integers(min_value=50, max_value=3000))
        return ("metadata: " + "[" * depth + "]" * depth + "\n").encode()
    if kind == "laughs":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, n)]
        return ("\n".join(lines) + f"\nspec: {{containers: *a{n - 1}}}\n").encode()
    if kind == "recursive":
        return b"apiVersion: v1\nkind: Pod\nmetadata: &m {name: web, labels: *m}\n"
    if kind == "merge":
        return (
            "base: &b {name: app, image: busybox}\n"
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
            f"spec: {{containers: [{', '.join(['{<<: *b}'] * n)}]}}\n"
        ).encode()
    return as_yaml(replaced(("spec", "containers", 0, "resources", "limits", "cpu"), "9" * 10 * n))


manifests = st.one_of(
    st.text(alphabet=PUNCTUATION, max_size=200).map(str.encode),
    st.builds(
        lambda path, value: as_yaml(replaced(path, value)),
        st.sampled_from(FIELDS),
        json_values,
    ),
    yaml_amplifiers(),
    st.binary(max_size=200),
)


def check_one(data: bytes) -> Any:
    with call_budget(CALLS):
        return decode_file(data, PATH, NODE)


@SETTINGS
@given(manifests)
def test_a_manifest_is_a_pod_or_a_manifest_error_naming_the_file(data: bytes) -> None:
    result = check_one(data)
    if isinstance(result, ManifestError):
        assert result.path == PATH
        assert str(result).startswith(f"{PATH}: ")
        assert len(result.message) < 1000
        assert "Traceback" not in result.message
        assert not result.message.startswith("cannot be read as a pod"), result.message
    else:
        assert result["metadata"]["name"].endswith(f"-{NODE}")
        msgspec.convert(result, Pod, strict=False)


@SETTINGS
@given(st.sampled_from(FIELDS), json_values)
def test_a_hostile_field_in_a_pod_spec_decodes_or_names_its_path(
    path: tuple[str | int, ...], value: Any
) -> None:
    doc = replaced(path, value)
    try:
        with call_budget(CALLS):
            pod = decode_checked_pod(doc)
    except PodSpecError as e:
        assert e.field and not e.field.startswith(".")
    except msgspec.ValidationError as e:
        assert " - at `$." in str(e) or "Expected `object`" in str(e)
    else:
        assert isinstance(pod, Pod)


@settings(SETTINGS, max_examples=max(10, EXAMPLES // 4))
@given(manifests.filter(lambda d: isinstance(decode_file(d, PATH, NODE), ManifestError)))
def test_the_file_source_runs_the_good_manifest_beside_a_bad_one(bad: bytes) -> None:
    async def scan() -> list[str]:
        files = MemoryManifests()
        files.write("bad.yaml", bad)
        files.write("good.yaml", as_yaml(GOOD))
        source = FileSource(path=DIRECTORY, node_name=NODE, clock=LoopClock(), reader=files)
        await source.scan_once()
        return [p["metadata"]["name"] for p in source.items()]

    assert asyncio.run(scan()) == [f"web-{NODE}"]

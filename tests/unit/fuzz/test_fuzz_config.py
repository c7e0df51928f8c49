"""Bounded fuzzing of the configuration loader with malformed YAML.

Every generated file either loads or raises ``ConfigError`` whose lines each name the file
and stay short: never another exception, never more than a bounded number of Python calls per
input (counted, not timed: ``bench/`` measures speed). The generators cover
random text (YAML punctuation, control and non-ASCII characters), random structures under real
field names with wrong types, deep nesting, alias and merge-key amplifiers, and huge or exotic
numbers, quantities and durations. The seed is fixed (``derandomize``); ``NODEAGENT_FUZZ_EXAMPLES``
raises the example count for a longer run by hand.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import yaml
from bounded import call_budget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent import config
from nodeagent.errors import ConfigError

EXAMPLES = int(os.environ.get("NODEAGENT_FUZZ_EXAMPLES", "60"))
# At most about 48 000 Python calls per generated file today; 10x that is unbounded work.
CALLS = 500_000
HEADER = "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"
SETTINGS = settings(
    derandomize=True,
    max_examples=EXAMPLES,
    deadline=None,  # the work is counted below, never timed
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def _fields(section: str) -> list[str]:
    info = msgspec.inspect.type_info(config.Config)
    assert isinstance(info, msgspec.inspect.StructType)
    sub = next(f.type for f in info.fields if f.encode_name == section)
    while isinstance(sub, msgspec.inspect.Metadata):
        sub = sub.type
    assert isinstance(sub, msgspec.inspect.StructType)
    return [f.encode_name for f in sub.fields]


SECTIONS = {name: _fields(name) for name in ("kubelet", "node", "proxy")}
HOSTILE_SCALARS = [
    "1e100000000", "1e-100000000", "9" * 5000, "-" + "9" * 30, "0x" + "f" * 40, "1_000",
    "\u0661\u0662", "1\uff10s", "99999999999999999999s", "1" * 200 + "Mi", "8Ei", "1E", ".",
    "1e", "-0", "+5", "NaN", ".inf", "-.inf", "2001-13-01", "1:30:00", "0o777", "0b101",
    "~", "null", "yes", "off", "'quoted'", '"a\\x01b"', '"\\uD800"', "é" * 300, "x" * 5000,
    "&a", "*b", "!!binary AAAA", "!!python/object:os.system", "!!float 1e999", "!!int 0x",
    "%TAG", "@at", "`tick", "{", "[", "]", "}", "? key", "- item", "| block", "> folded",
]  # fmt: skip
PUNCTUATION = ":-[]{}&*!|>'\"%@`#,?\n\t \x00\x01\x1b\x7f\x85\u2028a1é\u0661"
SCALAR = st.one_of(
    st.sampled_from(HOSTILE_SCALARS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=30),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def _load(text: str, directory: Path) -> config.Config:
    path = directory / "config.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    args = argparse.Namespace(config=str(path))
    return config.resolve(args)


@pytest.fixture(scope="module")
def directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-config-") as name:
        yield Path(name)


def check(text: str, directory: Path) -> None:
    """The loader returns a Config or a short ConfigError naming the file, in bounded work."""
    try:
        with call_budget(CALLS):
            _load(text, directory)
    except ConfigError as e:
        message = str(e)
        assert message
        for line in message.splitlines():
            assert line.startswith((str(directory / "config.yaml"), "--config")), line
            assert len(line) < 600, line[:200]


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from(list(PUNCTUATION)), max_size=300))
def test_random_text(text: str, directory: Path) -> None:
    check(HEADER + text, directory)


@SETTINGS
@given(
    section=st.sampled_from(sorted(SECTIONS)),
    data=st.data(),
)
def test_real_fields_with_wrong_values(section: str, data: st.DataObject, directory: Path) -> None:
    fields = data.draw(
        st.dictionaries(st.sampled_from(SECTIONS[section]), VALUE, min_size=1, max_size=4)
    )
    body = yaml.safe_dump({section: fields}, allow_unicode=True)
    check(HEADER + body, directory)


@SETTINGS
@given(
    field=st.sampled_from(SECTIONS["kubelet"]),
    raw=st.sampled_from(HOSTILE_SCALARS),
    nested=st.sampled_from(["", "memory", "memory.available", "nodefs.available"]),
)
def test_hostile_scalars_written_raw(field: str, raw: str, nested: str, directory: Path) -> None:
    value = f"\n    {nested}: {raw}" if nested else f" {raw}"
    check(f"{HEADER}kubelet:\n  {field}:{value}\n", directory)


@SETTINGS
@given(
    depth=st.integers(min_value=1, max_value=3000),
    kind=st.sampled_from(["flow-seq", "flow-map", "block"]),
)
def test_deep_nesting(depth: int, kind: str, directory: Path) -> None:
    if kind == "flow-seq":
        body = "kubelet: " + "[" * depth + "]" * depth + "\n"
    elif kind == "flow-map":
        body = "kubelet: " + "{a: " * depth + "1" + "}" * depth + "\n"
    else:
        body = "kubelet:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(min(depth, 600)))
    check(HEADER + body, directory)


def _amplifier(width: int, levels: int, merge: bool) -> str:
    lines = ["  a0: &a0 {k: v}" if merge else "  a0: &a0 [lol]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(
            f"  a{i}: &a{i} {{<<: [{refs}], x{i}: 1}}" if merge else f"  a{i}: &a{i} [{refs}]"
        )
    return HEADER + "kubelet:\n  clusterDomain: x\nz:\n" + "\n".join(lines) + "\n"


@SETTINGS
@given(
    width=st.integers(min_value=1, max_value=12),
    levels=st.integers(min_value=1, max_value=40),
    merge=st.booleans(),
)
def test_alias_amplifiers_are_bounded(
    width: int, levels: int, merge: bool, directory: Path
) -> None:
    tracemalloc.start()
    try:
        check(_amplifier(width, levels, merge), directory)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20


def test_a_good_config_still_loads(directory: Path) -> None:
    loaded = _load(HEADER + "kubelet:\n  maxPods: 50\n  podPidsLimit: 4096\n", directory)
    assert loaded.kubelet.max_pods == 50
    assert loaded.kubelet.pod_pids_limit == 4096

"""Keyword names -> journald field names (journald drops entries' invalid fields)."""

from __future__ import annotations

import pytest

from nodeagent.log.native import field_name


@pytest.mark.parametrize(
    ("key", "name"),
    [
        pytest.param("pod_name", "POD_NAME", id="snake case is upper-cased"),
        pytest.param("podUID", "POD_UID", id="camel case gets underscores"),
        pytest.param("containerName", "CONTAINER_NAME", id="camel case word boundary"),
        pytest.param("node", "NODE", id="single word"),
        pytest.param("_private", "PRIVATE", id="leading underscore would be a trusted field"),
        pytest.param("__x", "X", id="several leading underscores"),
        pytest.param("2fa", "F_2FA", id="leading digit"),
        pytest.param("x-y.z", "X_Y_Z", id="punctuation"),
        pytest.param("message", "F_MESSAGE", id="cannot override MESSAGE"),
        pytest.param("priority", "F_PRIORITY", id="cannot override PRIORITY"),
        pytest.param("code_line", "F_CODE_LINE", id="cannot override CODE_LINE"),
        pytest.param("errno", "ERRNO", id="well-known journald fields may be set"),
        pytest.param("a" * 80, "A" * 64, id="at most 64 characters"),
    ],
)
def test_field_name(key: str, name: str) -> None:
    assert field_name(key) == name

"""ConfigMaps and Secrets as the volume payloads read them, and TokenRequest answers."""

from __future__ import annotations

import pytest

from nodeagent.volumemanager.content.objects import decode_config_map, decode_secret
from nodeagent.volumemanager.content.payloads import ObjectData
from nodeagent.volumemanager.content.tokens import decode_token_request, parse_time


def test_config_map_text_and_binary_data() -> None:
    obj = {"data": {"a": "x\n", "n": ""}, "binaryData": {"b": "AAH/", "bad": "***"}}
    assert decode_config_map(obj) == ObjectData({"a": b"x\n", "n": b"", "b": b"\x00\x01\xff"})
    assert decode_config_map({"metadata": {}}) == ObjectData({})


def test_secret_data_is_base64() -> None:
    assert decode_secret({"data": {"pw": "aHVudGVyMg==", "bad": "%%"}}) == ObjectData(
        {"pw": b"hunter2"}
    )
    assert decode_secret({"type": "Opaque"}) == ObjectData({})


def test_token_request_answer() -> None:
    token = decode_token_request(
        {
            "spec": {"expirationSeconds": 3607},
            "status": {"token": "eyJ", "expirationTimestamp": "2026-01-01T01:00:07Z"},
        }
    )
    assert (token.token, token.expiration, token.expiration_seconds) == (
        "eyJ",
        parse_time("2026-01-01T01:00:07+00:00"),
        3607,
    )
    with pytest.raises(ValueError, match="no token"):
        decode_token_request({"status": {"expirationTimestamp": "2026-01-01T01:00:07Z"}})

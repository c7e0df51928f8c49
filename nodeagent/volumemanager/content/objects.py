"""The data of a ConfigMap (``data`` and ``binaryData``) or a Secret (base64 ``data``) as the
bytes a volume's files hold; a key whose value is not valid base64 is left out.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from nodeagent.volumemanager.content.payloads import ObjectData


def decode_config_map(obj: Mapping[str, object]) -> ObjectData:
    data: dict[str, bytes] = {}
    binary = obj.get("binaryData") or {}
    if isinstance(binary, dict):
        for key, value in binary.items():
            try:
                data[str(key)] = base64.b64decode(str(value), validate=True)
            except binascii.Error:
                continue
    text = obj.get("data") or {}
    if isinstance(text, dict):
        data.update({str(k): str(v).encode() for k, v in text.items()})
    return ObjectData(data)


def decode_secret(obj: Mapping[str, object]) -> ObjectData:
    data: dict[str, bytes] = {}
    raw = obj.get("data") or {}
    if isinstance(raw, dict):
        for key, value in raw.items():
            try:
                data[str(key)] = base64.b64decode(str(value), validate=True)
            except binascii.Error:
                continue
    return ObjectData(data)

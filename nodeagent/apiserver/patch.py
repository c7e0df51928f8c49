"""Patch bodies: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902).

``two_way_*`` build the patch that turns ``old`` into ``new``; ``apply_*`` apply one (the fake
apiserver uses them, and tests check ``apply(old, two_way(old, new)) == new``).

Strategic merge needs the schema's merge keys. This module knows only the lists nodeagent
patches, given as dotted paths in a :data:`Schema`: a merge key name, or :data:`REPLACE` for
lists the kubelet always replaces whole (``status.addresses``, mis-annotated upstream as merge).
Lists not in the schema are atomic (replaced whole when they differ), as in the API.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any, Final

from nodeagent.apiserver.resources import Obj


class PatchType(enum.Enum):
    JSON = "application/json-patch+json"
    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


REPLACE: Final = "$replace"
Schema = Mapping[str, str]

NODE_SCHEMA: Final[Schema] = {
    "status.conditions": "type",
    "status.addresses": REPLACE,
    "status.volumesAttached": "name",
    "metadata.ownerReferences": "uid",
    "metadata.finalizers": REPLACE,
}


# --- JSON merge patch -----------------------------------------------------------------------


def two_way_merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    # A strategic merge patch without merge keys: every list is replaced whole.
    return two_way_strategic_patch(old, new, schema={})


def apply_merge_patch(target: object, patch: object) -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: Obj = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


# --- strategic merge patch ------------------------------------------------------------------

_MISSING: Final = object()


def two_way_strategic_patch(
    old: Mapping[str, Any], new: Mapping[str, Any], *, schema: Schema, _path: str = ""
) -> Obj:
    patch: Obj = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if before == value:
            continue
        path = f"{_path}.{key}" if _path else key
        strategy = schema.get(path)
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            patch[key] = two_way_strategic_patch(before, value, schema=schema, _path=path)
        elif isinstance(value, list) and strategy == REPLACE:
            patch[key] = [*copy.deepcopy(value), {"$patch": "replace"}]
        elif isinstance(value, list) and strategy and isinstance(before, list):
            patch[key], order = _diff_keyed_list(before, value, strategy, schema, path)
            patch[f"$setElementOrder/{key}"] = order
        else:
            patch[key] = copy.deepcopy(value)
    return patch


def _diff_keyed_list(
    old: list[Any], new: list[Any], key: str, schema: Schema, path: str
) -> tuple[list[Any], list[Any]]:
    old_by = {item.get(key): item for item in old if isinstance(item, Mapping)}
    new_keys = {item.get(key) for item in new if isinstance(item, Mapping)}
    changes: list[Any] = []
    for item in new:
        before = old_by.get(item.get(key))
        if before is None:
            changes.append(copy.deepcopy(item))
        elif before != item:
            diff = two_way_strategic_patch(before, item, schema=schema, _path=path)
            changes.append({key: item[key], **diff})
    for k in old_by.keys() - new_keys:
        changes.append({key: k, "$patch": "delete"})
    return changes, [{key: item.get(key)} for item in new]


def apply_strategic_patch(target: object, patch: object, *, schema: Schema, _path: str = "") -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: Obj = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    orders = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$setElementOrder/")}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        path = f"{_path}.{key}" if _path else key
        strategy = schema.get(path)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and value and value[-1] == {"$patch": "replace"}:
            result[key] = copy.deepcopy(value[:-1])
        elif isinstance(value, list) and strategy and strategy != REPLACE:
            merged = _apply_keyed_list(result.get(key) or [], value, strategy, schema, path)
            result[key] = _reorder(merged, orders.get(key), strategy)
        elif isinstance(value, Mapping):
            result[key] = apply_strategic_patch(result.get(key), value, schema=schema, _path=path)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _apply_keyed_list(
    current: list[Any], changes: list[Any], key: str, schema: Schema, path: str
) -> list[Any]:
    items = [copy.deepcopy(i) for i in current]
    for change in changes:
        idx = next((n for n, i in enumerate(items) if i.get(key) == change.get(key)), None)
        if change.get("$patch") == "delete":
            if idx is not None:
                del items[idx]
        elif idx is None:
            items.append(copy.deepcopy(change))
        else:
            items[idx] = apply_strategic_patch(items[idx], change, schema=schema, _path=path)
    return items


def _reorder(items: list[Any], order: list[Any] | None, key: str) -> list[Any]:
    if not order:
        return items
    rank = {entry.get(key): n for n, entry in enumerate(order)}
    return sorted(items, key=lambda i: rank.get(i.get(key), len(rank)))


# --- JSON patch -----------------------------------------------------------------------------


def pointer(*parts: str) -> str:
    """A JSON pointer from raw path parts (``~`` and ``/`` escaped)."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def op_add(path: str, value: object) -> Obj:
    return {"op": "add", "path": path, "value": value}


def op_replace(path: str, value: object) -> Obj:
    return {"op": "replace", "path": path, "value": value}


def op_remove(path: str) -> Obj:
    return {"op": "remove", "path": path}


def op_test(path: str, value: object) -> Obj:
    return {"op": "test", "path": path, "value": value}


class JsonPatchError(ValueError):
    pass


def apply_json_patch(target: Obj, ops: list[Obj]) -> Obj:
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        kind = op["op"]
        exists = (
            (last in parent)
            if isinstance(parent, dict)
            else (last == "-" or int(last) < len(parent))
        )
        if kind == "test":
            if not exists or parent[last if isinstance(parent, dict) else int(last)] != op["value"]:
                raise JsonPatchError(f"test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if kind == "replace" and not exists:
                raise JsonPatchError(f"replace of missing {op['path']}")
            if isinstance(parent, list):
                if last == "-":
                    parent.append(copy.deepcopy(op["value"]))
                elif kind == "add":
                    parent.insert(int(last), copy.deepcopy(op["value"]))
                else:
                    parent[int(last)] = copy.deepcopy(op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if not exists:
                raise JsonPatchError(f"remove of missing {op['path']}")
            del parent[last if isinstance(parent, dict) else int(last)]
        else:
            raise JsonPatchError(f"unsupported op {kind!r}")
    return doc

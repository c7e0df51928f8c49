"""A PersistentVolume's ``spec.nodeAffinity`` against the node's labels, as the kubelet checks
it before mounting (``storagehelpers.CheckNodeAffinity``: the required node selector terms are
ORed, the expressions of one term ANDed; ``matchFields`` only knows ``metadata.name``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_MATCH = "no matching NodeSelectorTerms"


class AffinityError(ValueError):
    pass


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError as e:
        raise AffinityError(f"invalid integer {value!r} in a node selector") from e


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    op = expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or ()]
    has = key in labels
    match op:
        case "In":
            return has and labels[key] in values
        case "NotIn":
            return not has or labels[key] not in values
        case "Exists":
            return has
        case "DoesNotExist":
            return not has
        case "Gt" | "Lt":
            if not has or len(values) != 1:
                return False
            left, right = _int(labels[key]), _int(values[0])
            return left > right if op == "Gt" else left < right
    raise AffinityError(f"{op!r} is not a valid node selector operator")


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> bool:
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False  # an empty term matches nothing
    if not all(_expression_matches(e, labels) for e in exprs):
        return False
    for f in fields:
        if f.get("key") != "metadata.name":
            raise AffinityError(f"{f.get('key')!r} is not a valid field selector key")
        if not _expression_matches({**f, "key": "name"}, {"name": node_name}):
            return False
    return True


def check_node_affinity(pv: Mapping[str, Any], labels: Mapping[str, str], node_name: str) -> None:
    """Raise :class:`AffinityError` (``no matching NodeSelectorTerms``) when ``pv`` may not be
    used on this node."""
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if not required:
        return
    terms = required.get("nodeSelectorTerms") or ()
    if not any(_term_matches(t, labels, node_name) for t in terms):
        raise AffinityError(NO_MATCH)

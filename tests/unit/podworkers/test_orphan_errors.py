"""How the pod workers and the sync loop word a failed step: the runtime's own errors (one,
or the group ``kill_pod`` raises) as one line, anything else with its traceback."""

from __future__ import annotations

from nodeagent.kuberuntime import CriError, runtime_errors


def test_one_runtime_error_is_its_text() -> None:
    e = CriError("CRI RemovePodSandbox: cannot delete running task")
    assert runtime_errors(e) == "CRI RemovePodSandbox: cannot delete running task"


def test_a_group_of_runtime_errors_joins_their_texts() -> None:
    group = ExceptionGroup("error killing pod", [CriError("stop a"), CriError("stop sandbox")])
    assert runtime_errors(group) == "stop a; stop sandbox"


def test_anything_else_keeps_its_traceback() -> None:
    assert runtime_errors(ValueError("bug")) is None
    assert runtime_errors(ExceptionGroup("mixed", [CriError("x"), KeyError("y")])) is None

"""Verbosity like the kubelet's -v: v(n) logs when n <= the configured verbosity."""

from __future__ import annotations

import io

import pytest

from nodeagent import log


def logged(stream: io.StringIO) -> list[str]:
    return [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize(
    ("verbosity", "expected"),
    [
        pytest.param(0, ['"v0"', '"info"', '"warning"'], id="-v 0: only v(0)"),
        pytest.param(2, ['"v0"', '"v2"', '"info"', '"warning"'], id="-v 2: state changes"),
        pytest.param(4, ['"v0"', '"v2"', '"v4"', '"info"', '"warning"', '"debug"'],
                     id="-v 4: debug, and log.debug() too"),
        pytest.param(6, ['"v0"', '"v2"', '"v4"', '"v6"', '"info"', '"warning"', '"debug"'],
                     id="-v 6: trace"),
    ],
)  # fmt: skip
def test_v_levels_up_to_the_verbosity_are_logged(verbosity: int, expected: list[str]) -> None:
    stream = io.StringIO()
    log.setup(verbosity=verbosity, environ={}, stream=stream)
    logger = log.get_logger("t")

    for n in (0, 2, 4, 6, 8):
        logger.v(n).info(f"v{n}")
    logger.info("info")
    logger.warning("warning")
    logger.debug("debug")

    assert logged(stream) == expected


def test_a_disabled_level_stays_disabled_through_bind_and_v() -> None:
    stream = io.StringIO()
    log.setup(verbosity=2, environ={}, stream=stream)
    quiet = log.get_logger("t").v(3)

    quiet.bind(pod_name="x").info("bound")
    quiet.v(0).error("nested")

    assert quiet.enabled is False
    assert log.get_logger("t").v(2).enabled is True
    assert stream.getvalue() == ""


def test_bound_fields_come_first_and_call_fields_win() -> None:
    stream = io.StringIO()
    log.setup(verbosity=0, environ={}, stream=stream)

    log.get_logger("t").bind(node="n1", pod_name="old").v(0).info("m", pod_name="new", n=1)

    assert logged(stream) == ['"m" node=n1 pod_name=new n=1']


def test_logger_names_are_under_nodeagent() -> None:
    assert log.get_logger("nodelease").name == "nodeagent.nodelease"
    assert log.get_logger("nodeagent.agent").name == "nodeagent.agent"

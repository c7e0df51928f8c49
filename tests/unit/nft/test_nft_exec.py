"""The real exec hands a process its input as a file and collects what it prints."""

from __future__ import annotations

from nodeagent.nft.runner import subprocess_exec


async def test_a_large_script_reaches_the_process_whole_as_a_regular_file() -> None:
    script = b"".join(b"add element ip t s { 10.0.%d.%d }\n" % divmod(i, 256) for i in range(60000))

    copied = await subprocess_exec(["cat"], script)
    kind = await subprocess_exec(["stat", "-L", "-c", "%F", "/dev/stdin"], script)

    assert copied.returncode == 0
    assert copied.stdout == script
    assert kind.stdout.strip() == b"regular file"


async def test_no_input_is_an_empty_stdin_and_failures_keep_their_exit_code_and_stderr() -> None:
    result = await subprocess_exec(["sh", "-c", "cat; echo oops >&2; exit 3"], b"")

    assert (result.returncode, result.stdout, result.stderr) == (3, b"", b"oops\n")

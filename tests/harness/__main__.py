"""``python -m harness build|csi-build|up|down``: the entry behind `make binaries`, `make csi`,
`make up`, `make down`."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    usage = (
        "usage: python -m harness build [--peers] | csi-build | up [--nodes N] | down"
        " | join-command"
    )
    if not argv or argv[0] in {"-h", "--help"}:
        print(usage)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "build":
        from harness import build

        return build.main(rest)
    if command == "csi-build":
        from harness import csi_build

        return csi_build.main(rest)
    if command in {"up", "down", "join-command"}:
        from harness import up

        return up.main([command, *rest])
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

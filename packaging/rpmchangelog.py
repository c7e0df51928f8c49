"""Turns packaging/changelog (Debian format, the one source) into nfpm's changelog YAML for the rpm.

``python packaging/rpmchangelog.py packaging/changelog > changelog.yml``: every entry becomes an
rpm ``%changelog`` entry with the same version, date, maintainer and items. The .deb ships the
Debian file itself (``changelog.Debian.gz``).
"""

from __future__ import annotations

import email.utils
import json
import re
import sys
from pathlib import Path

HEADER = re.compile(r"^(?P<name>\S+) \((?P<version>[^)]+)\) [^;]+; urgency=\S+$")
TRAILER = re.compile(r"^ -- (?P<who>.+?)  (?P<date>.+)$")


def entries(text: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    items: list[str] = []
    version = None
    for line in text.splitlines():
        if m := HEADER.match(line):
            version, items = m["version"], []
        elif line.startswith("  * "):
            items.append(line[4:].strip())
        elif line.startswith("    ") and items:
            items[-1] += " " + line.strip()
        elif (m := TRAILER.match(line)) and version:
            date = email.utils.parsedate_to_datetime(m["date"])
            out.append({
                "semver": version,
                "date": date.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "packager": m["who"],
                "changes": [{"note": item} for item in items],
            })  # fmt: skip
            version = None
    if not out:
        raise SystemExit("rpmchangelog.py: no entry found")
    return out


def main(argv: list[str]) -> int:
    # JSON is YAML: no YAML library needed in the build's Python.
    sys.stdout.write(json.dumps(entries(Path(argv[0]).read_text()), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

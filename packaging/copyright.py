"""Writes the packages' copyright file (Debian's machine-readable format) for the bundled venv.

``python packaging/copyright.py SITE_PACKAGES > copyright``: run by packaging/build.sh on the
venv it is about to pack, so the file lists exactly the distributions shipped, each with the
license its own metadata declares and the path of the full text it ships in its ``.dist-info``.
An unknown license spelling fails the build: add it to ``SPDX`` after reading the text.
"""

from __future__ import annotations

import email.parser
import re
import sys
from pathlib import Path

VENV = "/opt/nodeagent"
SITE = f"{VENV}/lib/python3.11/site-packages"
COMMON_LICENSES = {"Apache-2.0": "/usr/share/common-licenses/Apache-2.0"}
# The spellings found in the bundled distributions' metadata, as SPDX identifiers.
SPDX = {
    "apache 2.0": "Apache-2.0",
    "apache-2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "mit": "MIT",
    "the mit license (mit)": "MIT",
    "mit license": "MIT",
    "mit-0": "MIT-0",
    "bsd-3-clause": "BSD-3-Clause",
    "3-clause bsd license": "BSD-3-Clause",
    "bsd-2-clause": "BSD-2-Clause",
    "psf-2.0": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
}

HEADER = f"""\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nodeagent
Comment: nodeagent is packaged as a self-contained Python virtual environment in {VENV}.
 Besides nodeagent itself it bundles the third-party distributions listed below, each under its
 own license as declared in its metadata; the full text of each license is installed with the
 distribution, in the .dist-info directory named in its paragraph.

Files: {SITE}/nodeagent/* {SITE}/cri_protos/* {SITE}/csi_protos/*
Copyright: 2026 The nodeagent authors
License: Apache-2.0
"""


def license_of(metadata: email.message.Message) -> str:
    """The distribution's license as a DEP-5 expression of SPDX names ("A and B", "A or B")."""
    expression = metadata.get("License-Expression")
    if expression:
        names = re.split(r"\s+(AND|OR)\s+", expression.strip())
    else:
        # Some put the whole text in License:; its first line names it.
        raw = (metadata.get("License") or "").strip().split("\n", 1)[0].strip()
        if not raw:
            classifiers = metadata.get_all("Classifier") or []
            raw = next((c.rsplit("::", 1)[1].strip() for c in classifiers if "License" in c), "")
        names = [raw]
    spelled = []
    for name in names:
        if name in ("AND", "OR"):
            spelled.append(name.lower())
        elif name.lower() in SPDX:
            spelled.append(SPDX[name.lower()])
        else:
            raise SystemExit(f"copyright.py: unknown license {name!r}: add it to SPDX")
    return " ".join(spelled)


def paragraphs(site: Path) -> tuple[list[str], set[str]]:
    out = []
    used = {"Apache-2.0"}
    parser = email.parser.Parser()
    for dist_info in sorted(site.glob("*.dist-info"), key=lambda p: p.name.lower()):
        metadata = parser.parsestr((dist_info / "METADATA").read_text())
        name = metadata["Name"]
        if name == "nodeagent":
            continue
        expression = license_of(metadata)
        used |= {n for n in expression.split() if n not in ("and", "or")}
        tops = (
            (dist_info / "top_level.txt").read_text().split()
            if (dist_info / "top_level.txt").exists()
            else []
        )
        record = (dist_info / "RECORD").read_text().splitlines()
        roots = sorted({line.split("/", 1)[0].split(",", 1)[0] for line in record} | set(tops))
        roots = [r for r in roots if not r.endswith(".dist-info") and not r.startswith("..")]
        files = " ".join(f"{SITE}/{r}" + ("/*" if (site / r).is_dir() else "") for r in roots)
        texts = sorted(
            p.relative_to(site).as_posix()
            for p in dist_info.rglob("*")
            if p.is_file() and re.match(r"(?i)(licen[cs]e|copying|notice)", p.name)
        )
        comment = "Full license text: " + ", ".join(f"{SITE}/{t}" for t in texts)
        out.append(
            f"Files: {files}\n"
            f"Copyright: The {name} {metadata['Version']} authors (see its license file)\n"
            f"License: {expression}\n"
            f"Comment: {comment or 'no license file shipped'}\n"
        )
    return out, used


def license_paragraph(name: str) -> str:
    where = COMMON_LICENSES.get(name)
    text = (
        f"On Debian systems the full text is in {where}."
        if where
        else "The full text is installed with each distribution under it (see Comment above)."
    )
    return f"License: {name}\n {text}\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: copyright.py SITE_PACKAGES", file=sys.stderr)
        return 2
    dists, used = paragraphs(Path(argv[0]))
    licenses = [license_paragraph(name) for name in sorted(used)]
    sys.stdout.write("\n".join([HEADER, *dists, *licenses]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

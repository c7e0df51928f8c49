"""Writes the nodeagent(8) manual page (roff) from the command line and the config reference.

``python packaging/manpage.py VERSION DATE > nodeagent.8``: run by packaging/build.sh with the
development venv, so the page describes exactly the parser (``nodeagent.__main__``) and the
configuration schema (``nodeagent.config.reference``) of the tree being packaged. Nothing in it is
written by hand twice: a new subcommand, flag or config field appears on the next build.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator

from nodeagent.__main__ import build_parser
from nodeagent.config.reference import RULES, RULES_TITLE, fields, gates

NAME = "nodeagent"
SUMMARY = "Kubernetes node agent: kubelet and kube-proxy (nftables mode) in one daemon"

DESCRIPTION = """\
nodeagent is the node half of Kubernetes in one Python process. It registers the Node with the
API server, renews its Lease, runs the Pods bound to the node through CRI on containerd (cgroup
v2, PSI, swap, graceful shutdown), reports their status like the kubelet, and turns Services and
EndpointSlices into nftables rules like kube-proxy's nftables mode.

The packages install it as the systemd unit `nodeagent.service`, enabled but not started: review
`/etc/nodeagent/config.yaml`, then `systemctl start nodeagent`. It logs to the journal
(`journalctl -u nodeagent`; every keyword of a record is a journal field, such as `POD_NAME`).
Stopping or restarting the agent leaves running pods alone: a new agent adopts them."""

FILES = [
    ("/etc/nodeagent/config.yaml", "The configuration file (see CONFIGURATION). A conffile."),
    (
        "/etc/default/nodeagent, /etc/sysconfig/nodeagent",
        "`NODEAGENT_ARGS`: extra flags for `nodeagent run` (Debian, RPM systems).",
    ),
    (
        "/lib/systemd/system/nodeagent.service",
        "The unit; override it with drop-ins in `/etc/systemd/system/nodeagent.service.d/`.",
    ),
    (
        "/var/lib/nodeagent",
        "State (`node.rootDir`): pods' volumes, certificates, checkpoints. Kept on package "
        "removal, deleted on purge.",
    ),
    ("/opt/nodeagent", "The program: a self-contained Python virtual environment."),
    (
        "/usr/share/doc/nodeagent/",
        "The packaging and unit documentation, and an example drop-in.",
    ),
]

EXIT_STATUS = [
    ("0", "Success."),
    ("1", "The daemon failed, or a command could not do its work."),
    ("2", "Bad usage or an invalid configuration (every problem is printed on stderr)."),
]

SEE_ALSO = "systemctl(1), journalctl(1), systemd.unit(5), nft(8), crictl(1), kubectl(1)"


def roff_text(text: str) -> str:
    """Markdown inline text (`code`, **bold**) as roff, escaped, never starting a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", text)
    text = re.sub(r"\*\*([^*]*)\*\*", r"\\fB\1\\fR", text)
    lines = [("\\&" + line if line.startswith((".", "'")) else line) for line in text.split("\n")]
    return "\n".join(lines)


def paragraphs(text: str) -> Iterator[str]:
    """Blank-line separated Markdown paragraphs; ``- `` items become tagged bullets."""
    for block in text.strip().split("\n\n"):
        items = re.split(r"(?m)^- ", block)
        if len(items) > 1:
            if items[0].strip():
                yield ".PP\n" + roff_text(" ".join(items[0].split()))
            for item in items[1:]:
                yield '.IP "\\(bu" 2\n' + roff_text(" ".join(item.split()))
        else:
            yield ".PP\n" + roff_text(" ".join(block.split()))


def option_names(action: argparse.Action) -> str:
    metavar = action.metavar or (action.dest.upper() if action.nargs != 0 else None)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    names = ", ".join(f"\\fB{roff_text(n)}\\fR" for n in action.option_strings)
    return f"{names} \\fI{roff_text(str(metavar))}\\fR" if metavar else names


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        text = parser._get_formatter()._expand_help(action)
    return text


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each direct subcommand, in registration order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def command_section(words: list[str], summary: str, parser: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    options = [
        a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction) and a.help != "==SUPPRESS=="
    ]
    children = subcommands(parser)
    if words[1:]:
        args = " [\\fIoptions\\fR]" if options else ""
        args += " \\fISUBCOMMAND\\fR" if children else ""
        positional = [a for a in parser._actions if not a.option_strings and a.dest != "command"]
        positional = [a for a in positional if not isinstance(a, argparse._SubParsersAction)]
        args += "".join(f" \\fI{roff_text(a.metavar or a.dest)}\\fR" for a in positional)
        out.append(f".SS {' '.join(words)}")
        out.append(f".B {' '.join(words)}{args}")
        out.append(".PP")
        out.append(roff_text(summary[:1].upper() + summary[1:] + ".") if summary else "")
        for a in positional:
            out += [".TP", f"\\fI{roff_text(a.metavar or a.dest)}\\fR", roff_text(a.help or "")]
        for a in options:
            out += [".TP", option_names(a), roff_text(help_text(parser, a))]
    for name, child_help, child in children:
        out += command_section([*words, name], child_help, child)
    return [line for line in out if line != ""]


def config_section() -> list[str]:
    out = [
        ".SH CONFIGURATION",
        ".PP",
        roff_text(
            "One YAML file, given with `--config`. Precedence: built-in defaults < file < flags; "
            "an empty file means all defaults. `nodeagent config show` prints the effective "
            "configuration, `nodeagent config validate` checks it. Durations are Go durations "
            "(`10s`, `1m30s`), quantities Kubernetes quantities (`100Mi`). The fields, with "
            "their type and default:"
        ),
    ]
    section = None
    for field in fields():
        if field.section != section:
            section = field.section
            out.append(f".SS {section}:")
        flag = f" Flag: `{field.flag}`." if field.flag else ""
        default = "required" if field.default == "required" else f"default {field.default}"
        out += [
            ".TP",
            f"\\fB{roff_text(field.path)}\\fR",
            roff_text(f"{field.description}{flag} ({field.type}, {default})"),
        ]
    out.append(".SS Feature gates (kubelet.featureGates)")
    for gate, default in gates().items():
        out += [".TP", f"\\fB{gate}\\fR", f"Default: {'true' if default else 'false'}."]
    out.append(f".SS {RULES_TITLE}")
    out += paragraphs(RULES)
    return out


def manpage(version: str, date: str) -> str:
    parser = build_parser()
    out = [
        f'.\\" Generated by packaging/manpage.py from the {NAME} {version} sources; do not edit.',
        f'.TH NODEAGENT 8 "{date}" "{NAME} {version}" "System Administration"',
        ".SH NAME",
        f"{NAME} \\- {roff_text(SUMMARY)}",
        ".SH SYNOPSIS",
        f".B {NAME}",
        "\\fICOMMAND\\fR [\\fIoptions\\fR]",
        ".br",
        f".B {NAME}",
        "\\fB\\-\\-version\\fR",
        ".SH DESCRIPTION",
        *paragraphs(DESCRIPTION),
        ".SH COMMANDS",
        *command_section([NAME], "", parser),
        *config_section(),
        ".SH FILES",
    ]
    for path, text in FILES:
        out += [".TP", f"\\fI{roff_text(path)}\\fR", roff_text(text)]
    out.append(".SH EXIT STATUS")
    for code, text in EXIT_STATUS:
        out += [".TP", f"\\fB{code}\\fR", roff_text(text)]
    out += [".SH SEE ALSO", roff_text(SEE_ALSO)]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: manpage.py VERSION DATE", file=sys.stderr)
        return 2
    sys.stdout.write(manpage(*argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

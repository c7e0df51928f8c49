"""Which chains and jump rules the harness removes from an iptables-nft table it shares."""

from __future__ import annotations

import pytest
from harness import hoststate
from harness.hoststate import _only_empty_base_chains, chains_to_remove

PORTMAP_NAT = """\
table ip nat { # handle 179
	chain CNI-HOSTPORT-SETMARK { # handle 1
		counter packets 0 bytes 0 meta mark set mark or 0x2000 # handle 2
	}

	chain CNI-HOSTPORT-MASQ { # handle 3
		meta mark & 0x00002000 == 0x00002000 counter packets 0 bytes 0 masquerade # handle 4
	}

	chain POSTROUTING { # handle 5
		type nat hook postrouting priority srcnat; policy accept;
		counter packets 7226 bytes 456106 jump CNI-HOSTPORT-MASQ # handle 6
		oifname "eth0" counter packets 3 bytes 180 masquerade # handle 20
	}

	chain CNI-HOSTPORT-DNAT { # handle 7
		tcp dport 8080 counter packets 0 bytes 0 jump CNI-DN-1a2b3c # handle 13
	}

	chain CNI-DN-1a2b3c { # handle 12
		tcp dport 8080 counter packets 0 bytes 0 dnat to 10.244.8.5:80 # handle 14
	}

	chain PREROUTING { # handle 8
		type nat hook prerouting priority dstnat; policy accept;
		fib daddr type local counter packets 90 bytes 5400 jump CNI-HOSTPORT-DNAT # handle 9
	}

	chain OUTPUT { # handle 10
		type nat hook output priority -100; policy accept;
		fib daddr type local counter packets 6480 bytes 408725 goto CNI-HOSTPORT-DNAT # handle 11
	}

	chain KUBE-KUBELET-CANARY { # handle 15
	}
}
"""


def test_the_portmap_chains_and_every_jump_to_them_are_chosen_and_nothing_else() -> None:
    jumps, chains = chains_to_remove(PORTMAP_NAT, ("CNI-HOSTPORT-", "CNI-DN-"))

    assert chains == [
        "CNI-HOSTPORT-SETMARK",
        "CNI-HOSTPORT-MASQ",
        "CNI-HOSTPORT-DNAT",
        "CNI-DN-1a2b3c",
    ]
    assert jumps == [
        ("POSTROUTING", "6"),
        ("CNI-HOSTPORT-DNAT", "13"),
        ("PREROUTING", "9"),
        ("OUTPUT", "11"),
    ]


def test_a_chain_that_was_there_before_stays_and_so_do_the_jumps_to_it() -> None:
    jumps, chains = chains_to_remove(PORTMAP_NAT, ("KUBE-", "CNI-DN-"), keep={"CNI-DN-1a2b3c"})

    assert chains == ["KUBE-KUBELET-CANARY"]
    assert jumps == []


def test_a_table_is_empty_with_only_rule_less_base_chains_and_the_iptables_nft_warning() -> None:
    emptied = """\
# Warning: table ip nat is managed by iptables-nft, do not touch!
table ip nat {
	chain POSTROUTING {
		type nat hook postrouting priority srcnat; policy accept;
	}
}
"""
    assert _only_empty_base_chains(emptied)
    assert _only_empty_base_chains("table ip6 nat {\n}\n")
    assert not _only_empty_base_chains(PORTMAP_NAT)


def test_only_a_table_with_nothing_in_it_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    listings = {"ip6 nat": "table ip6 nat {\n}\n", "ip nat": PORTMAP_NAT}
    deleted: list[tuple[str, ...]] = []

    def nft(*args: str) -> str:
        if args[0] == "delete":
            deleted.append(args)
            return ""
        return listings[" ".join(args[2:4])]

    monkeypatch.setattr(hoststate, "_nft", nft)
    monkeypatch.setattr(hoststate, "nft_tables", lambda: set(listings))

    assert hoststate.drop_empty_tables(("ip nat", "ip6 nat", "inet filter")) == ["ip6 nat"]
    assert deleted == [("delete", "table", "ip6", "nat")]

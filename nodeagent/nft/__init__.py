"""A small nftables layer shaped like knftables: objects, transactions, one interface, a runner.

::

    nft = NFTables(family="ip", table="nodeagent")          # or testing.fake_nft.FakeNFTables
    tx = nft.new_transaction()
    tx.add(Table())
    tx.add(Map(name="service-ips", type="ipv4_addr . inet_proto . inet_service : verdict"))
    tx.flush(Map(name="service-ips"))
    tx.add(Element(map="service-ips", key=("10.96.0.1", "tcp", "443"), value=("goto cluster-1",)))
    await nft.run(tx)                                         # all or nothing

Chains hold static rules; sets and maps hold the dynamic data; flush and refill rather than
"add if missing".
"""

from nodeagent.nft.errors import Busy, Exists, InvalidTransaction, NftError, NotFound
from nodeagent.nft.interface import NFTablesInterface
from nodeagent.nft.objects import Chain, Element, Family, Map, Rule, Set, Table
from nodeagent.nft.runner import NFTables
from nodeagent.nft.state import TableState
from nodeagent.nft.transaction import Transaction, Verb

__all__ = [
    "Busy",
    "Chain",
    "Element",
    "Exists",
    "Family",
    "InvalidTransaction",
    "Map",
    "NFTables",
    "NFTablesInterface",
    "NftError",
    "NotFound",
    "Rule",
    "Set",
    "Table",
    "TableState",
    "Transaction",
    "Verb",
]

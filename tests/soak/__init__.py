"""The soak: a seeded random workload and random faults against a multi-node cluster of its
own, judged all the time by invariants checked from outside the node (`make soak`,
docs/reliability.md).

Modules: ``invariants`` (the pure judgements), ``observe`` (what the API, CRI and the kernel
show), ``plan`` (the seeded workload and fault timeline), ``workload`` and ``faults`` (carrying
them out), ``run`` (the loop), ``report`` (tables and the RSS/CPU plot).
"""

"""Ray's command line (``ray start ...``) with every address of the node kept
on the loopback: Ray replaces ``127.0.0.1`` with the machine's own address
when a node joins a cluster, and the test cluster must not listen or send
anywhere but on the loopback.

Usage: ``python loopback_ray.py start --head ...`` (the arguments of ``ray``).
"""

from __future__ import annotations

import sys


def keep_loopback() -> None:
    """Makes this process's Ray resolve the node's address to 127.0.0.1."""
    from ray._private import services

    services.get_node_ip_address = lambda address=None: "127.0.0.1"
    services.resolve_ip_for_localhost = lambda host: host


if __name__ == "__main__":
    keep_loopback()
    from ray.scripts.scripts import main

    sys.exit(main())

"""A local two-node Ray cluster for the tests of ``rlpool.ray`` (``cargo
xtask test-ray``; never collected by ``test-all``, which has no Ray).

The session starts a head node and a second node on this machine, each a
``ray start --block`` in a session of its own (``python loopback_ray.py``:
Ray's command line with every address on the loopback), each with a custom
resource (``node_a``, ``node_b``) so that a test places an actor on the node
it chooses. A test that kills node b's processes restarts it afterwards
(:meth:`Cluster.ensure_node_b`). At the end, the driver disconnects, every
node's processes are stopped (SIGTERM, then SIGKILL after a deadline), and
the session fails if any process of theirs, any rlpool worker or any rlpool
``/dev/shm`` entry is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback_ray import keep_loopback

HERE = Path(__file__).resolve().parent

# The environment of every Ray process of the tests (and of this driver):
# no usage report, no token written to the home directory, no idle workers
# started ahead of need on a two-core machine.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    # A node that misses health checks for 30 s (not Ray's 15 s) is dead:
    # on two loaded cores a node's start can stall that long.
    "RAY_health_check_failure_threshold": "10",
}
os.environ.update(RAY_ENV)

# Logical CPUs per node: an actor asks for its pool's workers plus one.
NODE_CPUS = 4

# How long a node has to start and join (two loaded cores: Ray's start
# takes 10-30 s there).
NODE_PATIENCE = 120.0


def free_port() -> int:
    """A TCP port free on the loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """The live (non-zombie) processes of session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def rlpool_shm() -> set[str]:
    """The ``/dev/shm`` entries that carry rlpool's name."""
    try:
        return {n for n in os.listdir("/dev/shm") if "rlpool" in n.lower()}
    except OSError:
        return set()


class Node:
    """One ``ray start --block`` and its session."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log

    @property
    def sid(self) -> int:
        return self.popen.pid

    def pids(self) -> list[int]:
        return session_pids(self.sid)

    def kill(self) -> None:
        """SIGKILL to every process of the node at once (a lost node)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self, patience: float = 20.0) -> None:
        """SIGTERM to every process of the node, then SIGKILL to those left
        after ``patience`` seconds; reaps ``ray start``."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + patience
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)


class Cluster:
    """The head (resource ``node_a``) and a second node (``node_b``), on the
    loopback, in a temporary directory of their own."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rlr-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, Node] = {}
        self.env = {**os.environ, **RAY_ENV}
        self.env.pop("RAY_ADDRESS", None)
        # The workers import the test modules' classes (actors) by name.
        self.env["PYTHONPATH"] = str(HERE)

    def _start(self, name: str, args: list[str]) -> Node:
        log = self.dir / f"{name}-{len(self.nodes)}-{time.monotonic_ns()}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "loopback_ray.py"),
                    "start",
                    "--block",
                    "--node-ip-address=127.0.0.1",
                    f"--num-cpus={NODE_CPUS}",
                    "--object-store-memory=100000000",
                    "--disable-usage-stats",
                    f"--resources={json.dumps({name: 100})}",
                    *args,
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        node = Node(name, popen, log)
        self.nodes[name] = node
        return node

    def start_head(self) -> None:
        self._start(
            "node_a",
            [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--temp-dir={self.dir}",
            ],
        )

    def start_node_b(self) -> None:
        self._start("node_b", [f"--address={self.address}"])

    def wait_nodes(self, ray: Any, count: int) -> None:
        deadline = time.monotonic() + NODE_PATIENCE
        while True:
            alive_nodes = [n for n in ray.nodes() if n["Alive"]]
            if len(alive_nodes) >= count:
                return
            for node in self.nodes.values():
                if node.popen.poll() is not None:
                    raise RuntimeError(
                        f"ray start for {node.name} exited: {node.log.read_text()[-2000:]}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} nodes did not come up in {NODE_PATIENCE} s")
            time.sleep(0.2)

    @staticmethod
    def b_nodes(ray: Any) -> set[str]:
        """The ids of the nodes with node b's resource that Ray holds alive."""
        return {
            n["NodeID"] for n in ray.nodes() if n["Alive"] and "node_b" in n.get("Resources", {})
        }

    def ensure_node_b(self, ray: Any) -> None:
        """Restarts node b if a test killed it, and waits until Ray has
        marked the killed one dead (so that no actor is placed there)."""
        node = self.nodes.get("node_b")
        if node is not None and node.popen.poll() is None and node.pids():
            return
        old = self.b_nodes(ray)
        if node is not None:
            node.stop(patience=2.0)
        self.start_node_b()
        deadline = time.monotonic() + NODE_PATIENCE
        while True:
            now = self.b_nodes(ray)
            if now and not now & old:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"node b did not come back (alive: {now}, killed: {old})")
            time.sleep(0.2)

    def stop(self) -> None:
        for name in ("node_b", "node_a"):
            node = self.nodes.get(name)
            if node is not None:
                node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test that kills node b runs last: restarting a node and waiting
    for Ray to mark the killed one dead takes half a minute."""
    items.sort(key=lambda item: "node_loss" in item.nodeid)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The two-node cluster, this process connected to it as the driver."""
    keep_loopback()
    import ray

    shm_before = rlpool_shm()
    made = Cluster()
    try:
        made.start_head()
        deadline = time.monotonic() + NODE_PATIENCE
        while True:
            try:
                ray.init(address=made.address, log_to_driver=False)
                break
            except Exception:
                if time.monotonic() > deadline or made.nodes["node_a"].popen.poll() is not None:
                    raise
                time.sleep(0.5)
        made.start_node_b()
        made.wait_nodes(ray, 2)
        yield made
    finally:
        ray.shutdown()
        made.stop()
    sids = [node.sid for node in made.nodes.values()]
    left = [pid for sid in sids for pid in session_pids(sid)]
    assert not left, f"processes of the Ray nodes left after the session: {left}"
    added = rlpool_shm() - shm_before
    assert not added, f"/dev/shm entries of rlpool left: {sorted(added)}"


@pytest.fixture
def ray_cluster(cluster: Cluster) -> Cluster:
    """The cluster with both nodes up (node b restarted if a test killed
    it)."""
    import ray

    cluster.ensure_node_b(ray)
    return cluster


ON_A: dict[str, Any] = {"resources": {"node_a": 1}}
ON_B: dict[str, Any] = {"resources": {"node_b": 1}}
"""Actor options that place an actor on node a (the head) or node b."""

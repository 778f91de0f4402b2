"""A throwaway Redis Cluster for the tests: primaries with a replica each, on loopback.

The cluster is formed with plain cluster commands (``CLUSTER ADDSLOTSRANGE``, ``MEET``,
``REPLICATE``), so it needs only a ``redis-server`` binary (see
:func:`tests.redis_server.find_server_binary`), not ``redis-cli``. Nodes keep nothing
on disk but their cluster configuration, in a temporary directory, and a short node
timeout makes a replica take over within a few seconds of its primary's death.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

__all__ = ["Cluster", "start_cluster"]

SLOTS = 16384
NODE_TIMEOUT_MS = 1000


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    """A free port whose cluster bus port (``port + 10000``) is free too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 10000 <= 65535 and _bindable(port + 10000):
            return port


@dataclass
class Cluster:
    """The running nodes: ports and processes, primaries first."""

    binary: str
    root: Path
    ports: list[int]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The URL the service takes (any node; the client discovers the rest)."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2)

    def start(self, port: int) -> None:
        directory = self.root / str(port)
        directory.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--save",
                "",
                "--appendonly",
                "no",
                "--repl-diskless-sync-delay",
                "0",
                "--dir",
                str(directory),
                "--loglevel",
                "warning",
                "--logfile",
                str(directory / "log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait(lambda: bool(self.node(port).ping()), f"node {port} to start")

    def kill(self, port: int) -> None:
        """SIGKILL one node."""
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait(timeout=10)

    def primary_of(self, key: str) -> int:
        """The port of the primary that serves ``key`` now."""
        slot = int(self.node(self.alive()[0]).cluster("KEYSLOT", key))
        for start, end, primary, *_ in self.node(self.alive()[0]).execute_command(
            "CLUSTER", "SLOTS"
        ):
            if start <= slot <= end:
                return int(primary[1])
        raise AssertionError(f"no node serves slot {slot}")

    def replicated(self, primary: int, timeout: float = 15.0) -> None:
        """Until the replica of ``primary`` has acknowledged everything written to it so
        far, a probe write included (a replica that has only just linked up, and has not
        yet acknowledged a write, does not count)."""
        node = self.node(primary)
        ranges = [
            (int(start), int(end))
            for start, end, owner, *_ in node.execute_command("CLUSTER", "SLOTS")
            if int(owner[1]) == primary
        ]
        probe = next(
            f"probe-{k}"
            for k in range(100_000)
            if any(a <= int(node.cluster("KEYSLOT", f"probe-{k}")) <= b for a, b in ranges)
        )
        node.set(probe, b"1", ex=60)
        self._wait(
            lambda: int(node.execute_command("WAIT", 1, 200)) >= 1,
            f"the replica of node {primary} to acknowledge its writes",
            timeout,
        )

    def alive(self) -> list[int]:
        return [p for p in self.ports if p in self.procs]

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node reports ``cluster_state:ok`` and agrees on the slots."""

        def ok() -> bool:
            for port in self.alive():
                info = self.node(port).execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
            return True

        self._wait(ok, "the cluster to be ok", timeout)

    def stop(self) -> None:
        for port in list(self.procs):
            self.kill(port)

    @staticmethod
    def _wait(check: object, what: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():  # type: ignore[operator]
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what}")
            time.sleep(0.05)


def _node_id(client: redis.Redis) -> str:
    return str(client.execute_command("CLUSTER", "MYID").decode())


@contextmanager
def start_cluster(binary: str, primaries: int = 3, replicas: int = 1) -> Iterator[Cluster]:
    """Run a cluster of ``primaries`` primaries with ``replicas`` replicas each."""
    with tempfile.TemporaryDirectory(prefix="kameleon-cluster-") as tmp:
        ports = [_free_port() for _ in range(primaries * (1 + replicas))]
        cluster = Cluster(binary, Path(tmp), ports)
        try:
            for port in ports:
                cluster.start(port)
            first = cluster.node(ports[0])
            for k, port in enumerate(ports[:primaries]):
                start, end = k * SLOTS // primaries, (k + 1) * SLOTS // primaries - 1
                cluster.node(port).execute_command("CLUSTER", "ADDSLOTSRANGE", start, end)
            for port in ports[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", port)
            cluster.wait_ok()
            ids = [_node_id(cluster.node(p)) for p in ports[:primaries]]
            for k, port in enumerate(ports[primaries:]):
                primary = ids[k % primaries]
                Cluster._wait(
                    lambda p=port, i=primary: bool(
                        cluster.node(p).execute_command("CLUSTER", "REPLICATE", i)
                    ),
                    f"node {port} to replicate",
                )
            cluster.wait_ok()
            for port in ports[:primaries]:
                cluster.replicated(port)
            yield cluster
        finally:
            cluster.stop()

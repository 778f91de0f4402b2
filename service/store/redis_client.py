"""The Redis client the store uses: its timeouts, its connection pool, and when a
command is sent again."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from kameleon.service.store.redis_layout import CLUSTER_SCHEMES, plain_url

__all__ = ["CONNECTION_RETRIES", "connect"]

#: How many times a command that failed with a connection error is sent again.
CONNECTION_RETRIES = 2


def connect(url: str, *, timeout: float, max_connections: int) -> aioredis.Redis | RedisCluster:
    """A client of the Redis at ``url`` (``redis+cluster://`` for a cluster), for the store.

    A command that gets no answer within ``timeout`` seconds fails (and the request
    answers 503); an apply that the server runs later than that changes nothing (the
    script checks a deadline). A command that fails with a connection error (the
    connection was found dead: the server restarted since the pool opened it; or
    Redis answered that it is still loading its data) is sent again on a new
    connection, up to :data:`CONNECTION_RETRIES` times, after 50 then 100 ms; a
    command that timed out is never sent again.

    Why resending after a connection error is safe. Mostly the command never ran:
    it was written to a socket the old server no longer reads. But it may have run
    and only its reply been lost (the server died just after it). Every write of
    this store is then harmless to repeat: an apply is compare-and-set (a resent
    apply that ran already finds the chains' versions moved on, changes nothing and
    reports a conflict, which the caller decides again, so a told result is answered
    ``duplicate`` rather than applied twice; a request that names itself gets the
    proposals the first run leased), and it carries the deadline computed for the
    first send, so a resend run late changes nothing either (an ask that names no
    request and ran already leases other chains; those the first run leased are
    handed out again when their leases run out); stopping, saving diagnostics,
    refreshing expiries and deleting keys have the same effect run twice as once. A
    timed-out command is not resent because it may still be queued: the request
    answers 503 and the client's retry is the one resend. (Creating a session is the
    exception: a resent create whose first run landed finds the session there and
    fails.) A cluster client follows its own policy: it resends after connection
    errors and timeouts alike, up to 3 times, after refreshing the cluster's
    layout; an apply resent after a timeout runs past its deadline and changes
    nothing.

    ``max_connections`` bounds this process's store operations at once, each holding
    one connection at a time: more wait for one to finish, up to ``timeout`` seconds,
    then fail with :class:`~kameleon.service.store.records.StoreBusy`
    (:mod:`~kameleon.service.store.slots`).
    """
    options: dict[str, Any] = {
        "decode_responses": False,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 30,
        "max_connections": max_connections,
    }
    client: aioredis.Redis | RedisCluster
    if url.startswith(CLUSTER_SCHEMES):
        # A Redis Cluster: every key of a session carries the session's hash tag, so
        # each script and transaction runs on the one node that serves its slot.
        client = RedisCluster.from_url(plain_url(url), **options)
    else:
        # The asyncio client needs the asyncio Retry: the synchronous one returns the
        # command's coroutine unawaited, so its failure escaped the retry and every
        # connection that died with a restart answered one 503.
        retry = Retry(
            ExponentialBackoff(cap=0.1, base=0.025),
            CONNECTION_RETRIES,
            supported_errors=(RedisConnectionError,),
        )
        client = aioredis.Redis.from_url(url, retry=retry, **options)
    return client

from __future__ import annotations

import threading

from django.core.cache import caches


def test_threads_of_a_process_share_the_caches_redis_connections():
    """Django runs each ASGI request in a thread of its own, with a cache object of its own."""
    pools = []

    def request() -> None:
        cache = caches["default"]
        cache.get_or_set("shared-pool-probe", 1, timeout=5)
        pools.append(cache._cache.get_client(write=True).connection_pool)

    threads = [threading.Thread(target=request) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pools) == 3 and pools[0] is pools[1] is pools[2]

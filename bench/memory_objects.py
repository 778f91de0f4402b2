"""Which Python objects does the service keep after its sessions are deleted?

Run from the repository root (the app in process, on the memory store):

    .venv/bin/python bench/memory_objects.py [--cycles 2] [--sessions 6] [--steps 150]

One warm-up cycle (as in ``bench/memory_soak.py``: kameleon sessions, d = 8, 8 chains,
stepped past their warm-up of 100 iterations, so that the kernel proposal runs,
diagnosed, read and deleted), then ``tracemalloc`` snapshots before and after
``--cycles`` more; the largest growths by allocation site are printed. A leak shows as
a site whose growth scales with the sessions made; memory that the allocator keeps
(``bench/memory_soak.py`` sees it as RSS) does not show here at all.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from fastapi.testclient import TestClient
from memory_soak import cycle as soak_cycle

from kameleon.service.app import create_app
from kameleon.service.config import Settings


def cycle(client: TestClient, sessions: int, steps: int) -> None:
    """memory_soak's cycle of sessions (created, stepped, read), then their deletes."""
    for sid in soak_cycle(client, sessions, steps):
        client.delete(f"/v1/sessions/{sid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    with TestClient(create_app(Settings())) as client:
        cycle(client, args.sessions, args.steps)
        gc.collect()
        tracemalloc.start(25)
        before = tracemalloc.take_snapshot()
        for _ in range(args.cycles):
            cycle(client, args.sessions, args.steps)
        gc.collect()
        after = tracemalloc.take_snapshot()
    growth = after.compare_to(before, "traceback")
    total = sum(s.size_diff for s in growth)
    print(f"net growth over {args.cycles} cycles: {total / 1024:.0f} KiB")
    for stat in growth[:5]:
        print(f"{stat.size_diff / 1024:.0f} KiB in {stat.count_diff} blocks at")
        for line in stat.traceback.format()[-4:]:
            print("   ", line)


if __name__ == "__main__":
    main()

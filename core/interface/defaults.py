"""The words every surface of Kameleon shares, and their defaults, in one place.

``kameleon.sample``, ``kameleon run``, the HTTP schema (``service/schemas.py``) and the
clients in ``clients/`` all read (or are tested against) these values:

- ``CHAINS``: independent chains.
- ``WARMUP``: warm-up iterations per chain; their draws are not kept.
- ``ITERATIONS``: draws kept per chain *after* warm-up. Over HTTP a session's
  ``max_iterations`` counts warm-up too, so a create without it gets
  ``WARMUP + ITERATIONS`` (``warmup`` + :data:`ITERATIONS` when ``warmup`` is given).
"""

from __future__ import annotations

__all__ = ["CHAINS", "ITERATIONS", "WARMUP"]

#: Chains per run or session.
CHAINS = 4
#: Warm-up iterations per chain (adapted, then discarded).
WARMUP = 1000
#: Draws kept per chain after warm-up.
ITERATIONS = 2000

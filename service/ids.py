"""Proposal ids: ``c<chain>.i<iteration>``, ``c<chain>.e<epoch>.i0`` for the initial
point of a chain that was given a new one (epoch > 0), and ``c<chain>.i<iteration>.s<step>``
for the evaluations of a transition that needs several (step > 0). Opaque to clients."""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["ProposalId", "format_id", "parse_id"]

_ID = re.compile(
    r"c(0|[1-9][0-9]{0,8})(?:\.e([1-9][0-9]{0,8}))?\.i(0|[1-9][0-9]{0,17})(?:\.s([1-9][0-9]{0,8}))?"
)


class ProposalId(NamedTuple):
    chain: int
    epoch: int
    iteration: int
    step: int = 0


def format_id(chain: int, iteration: int, epoch: int = 0, step: int = 0) -> str:
    if iteration == 0 and epoch > 0:
        return f"c{chain}.e{epoch}.i0"
    if step > 0:
        return f"c{chain}.i{iteration}.s{step}"
    return f"c{chain}.i{iteration}"


def parse_id(text: str) -> ProposalId | None:
    """The parts of a well-formed id, or ``None``."""
    match = _ID.fullmatch(text)
    if match is None:
        return None
    chain, epoch, iteration, step = match.groups()
    epoch_n = int(epoch) if epoch else 0
    if epoch_n and iteration != "0":
        return None
    if step and iteration == "0":
        return None
    return ProposalId(int(chain), epoch_n, int(iteration), int(step) if step else 0)

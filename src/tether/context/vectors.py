"""Embedding vectors for tether.context.memory: unit-length float32 bytes, cosine, rank fusion.

Pure functions, no I/O. Vectors are stored at unit length as little-endian float32
(``BLOB``/``bytea``: 4 bytes per dimension), so a cosine similarity is a dot product.
"""

from __future__ import annotations

import heapq
import math
import operator
import sys
from array import array
from collections.abc import Iterable, Sequence

RRF_K = 60  # the usual reciprocal rank fusion constant: an item scores 1 / (RRF_K + rank)


def unit(vector: Sequence[float], where: str) -> list[float]:
    """``vector`` scaled to length 1. Raises TypeError when it is not numbers, ValueError
    when it is empty, zero or not finite; ``where`` starts the message."""
    try:
        values = [float(x) for x in vector]
    except (TypeError, ValueError):
        raise TypeError(f"{where} is not a list of numbers") from None
    norm = math.sqrt(sum(x * x for x in values))
    if not values or not math.isfinite(norm) or norm == 0:
        raise ValueError(
            f"{where} is empty, zero or not finite; it must be a non-zero list of finite floats"
        )
    return [x / norm for x in values]


def pack(vector: Sequence[float]) -> bytes:
    """Little-endian float32 bytes."""
    out = array("f", vector)
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def unpack(blob: bytes) -> array[float]:
    """The inverse of :func:`pack`."""
    out = array("f")
    out.frombytes(blob)
    if sys.byteorder == "big":
        out.byteswap()
    return out


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product (the cosine of two unit vectors)."""
    return float(sum(map(operator.mul, a, b)))


def nearest(scored: Iterable[tuple[float, int]], limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best ``(score, id)`` pairs as ``(id, score)``, best first."""
    return [(i, s) for s, i in heapq.nlargest(limit, scored)]


def fuse(rankings: Sequence[Sequence[int]]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each id scores the sum over the rankings of
    ``1 / (RRF_K + its rank)``; ``(id, score)`` best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item_id in enumerate(ranking, 1):
            scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])

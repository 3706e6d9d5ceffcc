"""Helpers of the memory and artifact tests: a deterministic toy embedder and row counts."""

from __future__ import annotations

import re
import zlib

from _conformance import Backend

DIMS = 32

# Words that mean the same thing share one axis, so that vector search finds what
# full-text search cannot (no shared word) and the test shows the vectors are used.
SYNONYMS = {
    "kitten": "cat",
    "kitty": "cat",
    "feline": "cat",
    "puppy": "dog",
    "hound": "dog",
    "shares": "stock",
    "equities": "stock",
    "rug": "mat",
    "carpet": "mat",
}


def toy_embed(texts: list[str]) -> list[list[float]]:
    """Bag of words hashed to ``DIMS`` axes, synonyms folded; one constant axis keeps
    every vector non-zero."""
    out = []
    for text in texts:
        vector = [0.0] * DIMS
        vector[0] = 0.1
        for word in re.findall(r"\w+", text.lower()):
            word = SYNONYMS.get(word, word)
            vector[1 + zlib.crc32(word.encode()) % (DIMS - 1)] += 1.0
        out.append(vector)
    return out


def count(backend: Backend, table: str, where: str = "") -> int:
    """Rows of one of tether's tables (optionally filtered)."""
    return int(backend.sql(f"SELECT count(*) FROM {table} {where}")[0][0])


def memory_tables(backend: Backend) -> list[str]:
    """Every table holding memory rows: on SQLite the items and the FTS index's own."""
    if backend.name == "sqlite":
        return ["memory_items", "memory_fts_docsize"]
    return ["memory_items"]

"""The words one tensor-parallel step sends: every plan of the step, as packed by the core.

A *record* is one executed plan: a small header, the plan's waits and whole-table resets,
the core's packed payload exactly as ``Arena.pack_plan`` lays it out (returned ids, then
per sub-pool page pairs and changed ``[v2p | p2v]`` rows with their values; see
``Plan::pack_into``), then a full copy of each reset sub-pool's ``[v2p | p2v]``. A *step
message* is a header followed by the step's records. Everything is int64, so a message
is one flat tensor a collective can carry.

Record layout (word offsets; ``N`` is the pool's number of sub-pools, so the header has
a fixed size and the core packs the payload straight into its final place)::

    [0] words in this record     [1] plan flags         [2] waits W   [3] resets R
    [4] sections S               [5] payload words P
    [6] tokens_at [7] num_tokens [8] req_at [9] num_req
    [10 : 10+7N]   per section: pool, src_at, dst_at, rows_at, vals_at, moves, rows
                   (S used, the rest zero)
    then W wait tokens, R reset sub-pools, P payload words, and the R reset tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MSG_HEADER",
    "RECORD_HEADER",
    "Record",
    "StepLog",
    "read_records",
]

RECORD_HEADER = 10
"""Words before a record's sections."""

SECTION_WORDS = 7
"""Words per section: pool, src_at, dst_at, rows_at, vals_at, moves, rows."""

MSG_HEADER = 4
"""Words before a message's records: total words, step, number of records, reserved."""


@dataclass(frozen=True)
class Record:
    """One decoded plan, as views into its message (no copies).

    Attributes:
        flags: ``Arena.plan_flags()`` bits (1 waits, 2 moves, 4 resets, 8 rows).
        waits: Completion tokens of in-flight forwards the moves wait on.
        resets: Sub-pools whose tables the plan rewrote whole.
        payload: The core's packed payload.
        tokens: ``(at, n)`` of the returned ids in ``payload``.
        sections: ``(pool, src_at, dst_at, rows_at, vals_at, moves, rows)`` per sub-pool
            with work, offsets into ``payload``.
        tables: The full ``[v2p | p2v]`` of each reset sub-pool, in ``resets`` order.
        words: The whole record (what its digest covers).
    """

    flags: int
    waits: np.ndarray
    resets: np.ndarray
    payload: np.ndarray
    tokens: tuple[int, int]
    sections: tuple[tuple[int, ...], ...]
    tables: tuple[np.ndarray, ...]
    words: np.ndarray

    @property
    def ids(self) -> np.ndarray:
        """The ids the plan's allocation returned (shape ``[n]``, int64; empty if none)."""
        at, n = self.tokens
        return self.payload[at : at + n]

    def describe(self) -> str:
        """A short account of what the plan did (for error messages)."""
        moves = sum(s[5] for s in self.sections)
        rows = sum(s[6] for s in self.sections)
        ids = self.ids[:4].tolist()
        shown = f" {ids}" if len(self.ids) <= 4 else f" {ids[:3]}..."
        parts = [f"{self.tokens[1]} ids{shown if len(self.ids) else ''}", f"{moves} page moves",
                 f"{rows} table rows"]  # fmt: skip
        for sec in self.sections:
            pool, at, n = sec[0], sec[3], sec[6]
            if 0 < n <= 4:  # small plans: the rows themselves ([v2p | p2v] index: value)
                rows = self.payload[at : at + n].tolist()
                vals = self.payload[sec[4] : sec[4] + n].tolist()
                parts.append(f"sub-pool {pool} rows {dict(zip(rows, vals))}")
        if len(self.resets):
            parts.append(f"reset of sub-pools {self.resets.tolist()}")
        return ", ".join(parts)


class StepLog:
    """The records of the current step, appended plan by plan into one growing buffer.

    Args:
        table_lens: Words of ``[v2p | p2v]`` per sub-pool (for reset copies).
    """

    def __init__(self, table_lens: list[int]) -> None:
        self.table_lens = table_lens
        self.head_words = RECORD_HEADER + SECTION_WORDS * len(table_lens)
        self._pad = [0] * self.head_words
        self.buf = np.zeros(1 << 14, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Start a new step: no records."""
        self.end = MSG_HEADER
        self.starts: list[int] = []

    def _room(self, words: int) -> np.ndarray:
        need = self.end + words
        if need > len(self.buf):
            grown = np.zeros(max(need, 2 * len(self.buf)), dtype=np.int64)
            grown[: self.end] = self.buf[: self.end]
            self.buf = grown
        return self.buf

    def append(
        self,
        arena: Any,
        flags: int,
        ids: np.ndarray | None,
        tables: list[tuple[np.ndarray, np.ndarray]] | None,
    ) -> np.ndarray:
        """Encode the arena's last plan as a record; returns the record's words.

        Args:
            arena: The pool's ``ukv._core.Arena`` (its last plan is packed).
            flags: ``arena.plan_flags()``.
            ids: Finished ids to write over the payload's returned ids (a plan whose
                ids the device finished from a device ``last_loc``), else None.
            tables: ``(v2p, p2v)`` of every sub-pool, read for reset copies only.
        """
        waits = arena.plan_waits() if flags & 1 else ()
        resets = arena.plan_resets() if flags & 4 else ()
        at = self.end
        head = self.head_words + len(waits) + len(resets)
        buf = self._room(head + 64)
        layout = arena.pack_plan(buf[at + head :], True, True)
        length = layout[0]
        extra = sum(self.table_lens[i] for i in resets)
        if at + head + length + extra > len(buf):
            buf = self._room(head + length + extra)
            layout = arena.pack_plan(buf[at + head :], True, True)
        _, tok_at, num_tok, req_at, num_req, sections = layout
        words = head + length + extra
        if ids is not None and num_req:
            num_req = 0  # the device finished them: ship final ids
            buf[at + head + tok_at : at + head + tok_at + num_tok] = ids
        hdr = [words, flags, len(waits), len(resets), len(sections), length,
               tok_at, num_tok, req_at, num_req]  # fmt: skip
        for sec in sections:
            hdr.extend(sec)
        hdr.extend(self._pad[: self.head_words - len(hdr)])
        if waits or resets:
            hdr.extend(waits)
            hdr.extend(resets)
        buf[at : at + head] = hdr
        o = at + head + length
        for i in resets:
            assert tables is not None, "a reset plan needs the tables it rewrote"
            v2p, p2v = tables[i]
            buf[o : o + len(v2p)] = v2p
            buf[o + len(v2p) : o + self.table_lens[i]] = p2v
            o += self.table_lens[i]
        self.starts.append(at)
        self.end = at + words
        return buf[at : self.end]

    def message(self, step: int) -> np.ndarray:
        """The step's message (header + records), a view of the buffer."""
        buf = self.buf
        buf[:MSG_HEADER] = (self.end, step, len(self.starts), 0)
        return buf[: self.end]

    def records(self) -> list[Record]:
        """The step's records, decoded."""
        return read_records(self.message(-1), self.table_lens)


def read_records(msg: np.ndarray, table_lens: list[int]) -> list[Record]:
    """Decode every record of a step message.

    Args:
        msg: A message as :meth:`StepLog.message` lays it out.
        table_lens: Words of ``[v2p | p2v]`` per sub-pool.
    """
    out = []
    at = MSG_HEADER
    head = RECORD_HEADER + SECTION_WORDS * len(table_lens)
    for _ in range(int(msg[2])):
        words = int(msg[at])
        out.append(_decode(msg[at : at + words], table_lens, head))
        at += words
    return out


def _decode(rec: np.ndarray, table_lens: list[int], head: int) -> Record:
    _, flags, nw, nr, ns, length, tok_at, num_tok, _req_at, num_req = (
        int(x) for x in rec[:RECORD_HEADER]
    )
    assert num_req == 0, "a shipped record carries final ids"
    secs = tuple(
        tuple(int(x) for x in rec[RECORD_HEADER + SECTION_WORDS * n :][:SECTION_WORDS])
        for n in range(ns)
    )
    o = head
    waits, resets = rec[o : o + nw], rec[o + nw : o + nw + nr]
    o += nw + nr
    payload = rec[o : o + length]
    o += length
    tables = []
    for i in resets.tolist():
        tables.append(rec[o : o + table_lens[i]])
        o += table_lens[i]
    return Record(flags, waits, resets, payload, (tok_at, num_tok), secs, tuple(tables), rec)

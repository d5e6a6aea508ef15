"""The Worker's intake: delivered entries become Jobs, or the contract settles them first.

Owns the per-entry hot path. For each entry read (or reclaimed): a replay for another
group joins the acks; one past max deliveries or rejected by the parser joins the
settlements (with the record and reason ``contract`` gives); a parser bug is logged and
the entry stays pending; the rest become Jobs waiting for a lane. Never talks to Redis
and never runs a handler.

Cost: this is the Worker's own per-entry work, about 2.4 µs of CPU per entry. New entries
(``accept_new``) take an inlined path: the replay check and the default parser without a
function call per entry, and each Job built by filling its ``__dict__`` (a third of the
frozen dataclass ``__init__``). Anything unusual goes through ``admit``, the contract's
general path, which reclaimed entries always take.
"""

from __future__ import annotations

import logging
from typing import Any

from queue_core.clock import now_ms
from queue_core.jobs import Job, UnparseableEntry
from queue_core.parsing import fields_parse
from queue_core.worker.config import WorkerConfig
from queue_core.worker.contract import REPLAY_KEY, entry_admit, unparseable_settle
from queue_core.worker.inflight import InFlight
from queue_core.worker.settle import SettleBatch
from queue_core.worker.stats import WorkerStats
from queue_core.worker.wire import AckBatch

log = logging.getLogger("queue_core.worker")


class Intake:
    """Admits entries into ``flight.waiting``; what must not run goes to acks or settles."""

    def __init__(
        self,
        *,
        config: WorkerConfig,
        stats: WorkerStats,
        flight: InFlight,
        acks: AckBatch,
        settles: SettleBatch,
    ) -> None:
        self._config = config
        self._stats = stats
        self._waiting = flight.waiting
        # Not their lists: each batch swaps its list out when it starts writing.
        self._acks = acks
        self._settles = settles

    def accept_new(self, entries: list[list[Any]]) -> None:
        """Entries read with ``>``: first delivery, so the count is 1. The per-entry hot path.

        ``contract.replay_elsewhere`` and ``fields_parse`` are inlined for the common case
        (about 2.4 µs per entry here in all; a call for the replay check alone would add
        ~35 ns, timeit on the 2-core machine); anything unusual goes through ``admit``,
        the contract's general path.
        """
        config = self._config
        stream, group, acks = config.stream, config.group, self._acks.waiting
        group_b = group.encode()
        parse = config.parser
        default_parse = parse is fields_parse
        decode = bytes.decode
        jobs = self._waiting.append
        proto = {"stream": stream, "group": group, "delivery_count": 1, "consumer": config.consumer}
        new = object.__new__
        set_dict = object.__setattr__
        for entry_id, kv in entries:
            if kv is None:
                self.admit(decode(entry_id), None, 1)
                continue
            it = iter(kv)
            raw = dict(zip(it, it, strict=False))  # pairs: Redis never sends an odd list
            target = raw.get(REPLAY_KEY)
            if target is not None and target != group_b:
                # contract.replay_elsewhere, inlined: a replay for another group.
                acks.append(entry_id)
                self._stats.skipped += 1
                log.debug("%s %r is a replay for group %r; acked", stream, entry_id, target)
                continue
            fields: dict[str, str] | None
            try:
                if default_parse and raw:
                    # fields_parse, inlined: map() decodes in C, no frame per entry.
                    it = map(decode, kv)
                    fields = dict(zip(it, it, strict=False))
                else:
                    fields = parse(raw)
            except Exception:
                fields = self._parse_slow(decode(entry_id), raw, 1)
                if fields is None:
                    continue
            # Job(...) without its frozen __init__: same fields, a third of the cost.
            job = new(Job)
            set_dict(
                job, "__dict__", {**proto, "id": decode(entry_id), "fields": fields, "raw": raw}
            )
            jobs(job)
        self._stats.read += len(entries)

    def admit(self, entry_id: str, raw: dict[bytes, bytes] | None, count: int) -> Job | None:
        """The contract's general path (reclaimed entries): replay, over-max, parse."""
        config = self._config
        admission = entry_admit(
            entry_id=entry_id, raw=raw, delivery_count=count, group=config.group,
            max_deliveries=config.max_deliveries,
        )  # fmt: skip
        if admission.skip:
            self._acks.waiting.append(entry_id)
            self._stats.skipped += 1
            return None
        if admission.settle is not None:
            self._settles.queued.append(admission.settle)
            return None
        fields = self._parse_slow(entry_id, raw, count)
        if fields is None:
            return None
        return Job(config.stream, config.group, entry_id, fields, count, config.consumer, raw or {})

    def _parse_slow(
        self, entry_id: str, raw: dict[bytes, bytes] | None, count: int
    ) -> dict[str, str] | None:
        """The parser, with its outcomes: fields; None after queuing a dead-letter for an
        UnparseableEntry; None for a parser bug (logged; the entry stays pending)."""
        config = self._config
        try:
            return config.parser(raw)
        except UnparseableEntry as exc:
            log.warning("unparseable entry %s %s: %s", config.stream, entry_id, exc)
            self._settles.queued.append(
                unparseable_settle(
                    entry_id=entry_id,
                    raw_missing=raw is None,
                    delivery_count=count,
                    exc=exc,
                    group=config.group,
                    consumer=config.consumer,
                    failed_at_ms=now_ms(),
                )  # fmt: skip
            )
        except Exception:
            log.exception("the job parser failed on %s %s; it stays pending", config.stream,
                          entry_id)  # fmt: skip
        return None

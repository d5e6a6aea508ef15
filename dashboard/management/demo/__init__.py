"""The demo's world: stream and group names, and which workers run on them.

Used by the ``demo`` command, the demo producer and their tests. Every key the demo
writes starts with ``demo:`` (companions with ``{demo:``), so a demo pointed at a real
server by ``REDIS_URL`` never touches anything else; nothing here ever flushes.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Prefix of every demo stream; the companions of ``demo:orders`` are ``{demo:orders}:dlq``…
DEMO_PREFIX = "demo:"
ORDERS = DEMO_PREFIX + "orders"
EMAILS = DEMO_PREFIX + "emails"
#: Where the demo workers' handlers live, as a worker names them (module:function).
HANDLERS = "dashboard.management.demo.handlers:"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One ``queue_worker`` process the demo runs."""

    stream: str
    group: str
    handler: str
    consumer: str
    concurrency: int = 1
    batch: int = 10
    #: The consumer the demo SIGKILLs mid-batch, leaving stale pending entries behind.
    doomed: bool = False


#: Two groups read the same orders (billing and shipping); emails have one group.
#: Shipping runs the slow handler with three consumers; one of them is killed.
WORKERS: tuple[WorkerSpec, ...] = (
    WorkerSpec(ORDERS, "billing", HANDLERS + "flaky", "billing-1"),
    WorkerSpec(ORDERS, "billing", HANDLERS + "flaky", "billing-2"),
    # batch == concurrency: a worker told to stop finishes at most one slow round.
    WorkerSpec(
        ORDERS, "shipping", HANDLERS + "slow", "shipping-1", concurrency=4, batch=4
    ),
    WorkerSpec(
        ORDERS, "shipping", HANDLERS + "slow", "shipping-2", concurrency=4, batch=4
    ),
    WorkerSpec(
        ORDERS, "shipping", HANDLERS + "slow", "shipping-3", concurrency=4, batch=4,
        doomed=True,
    ),
    WorkerSpec(EMAILS, "mailer", HANDLERS + "normal", "mailer-1", concurrency=2),
)  # fmt: skip


def demo_groups() -> dict[str, tuple[str, ...]]:
    """Stream -> its groups, in the order the workers list them."""
    groups: dict[str, list[str]] = {}
    for spec in WORKERS:
        names = groups.setdefault(spec.stream, [])
        if spec.group not in names:
            names.append(spec.group)
    return {stream: tuple(names) for stream, names in groups.items()}

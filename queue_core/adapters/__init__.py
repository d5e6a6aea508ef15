"""Ackboard for workers written with other frameworks: one module per framework.

- ``queue_core.adapters.faststream``: a FastStream middleware for ``StreamSub`` consumers
  of a consumer group (``pip install ackboard[faststream]``);
- ``queue_core.adapters.taskiq``: a taskiq middleware for taskiq-redis's
  ``RedisStreamBroker`` (``pip install ackboard[taskiq]``).

Each gives its framework's workers the three things Ackboard cannot read from Redis by
itself: every failed attempt in ``{S}:failures`` with its traceback, the dead-letter move
after ``max_deliveries`` through Ackboard's atomic script, and a heartbeat per consumer
(with the group's pause honoured). Both write through ``queue_core.recording`` and
``queue_core.control``'s formats, so the dashboard cannot tell them from Ackboard's own
worker. This package imports no framework: each module imports only its own, so
installing one extra is enough. Never imports Django.
"""

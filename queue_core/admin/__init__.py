"""Fleet control's group administration: retire consumers, create and delete groups,
reset a group's position and trim a stream.

One module per subject, each importing only the ones below it:

- ``shared``: ``Refused``, the liveness constants, stream-id order, the ``action`` event;
- ``reads``: the read-only helpers (XINFO, heartbeats, bounded counts, ``entries_read_at``);
- ``positions``: ``Position`` and ``position_parse`` (pure);
- ``groups``: ``group_create``, ``group_delete``;
- ``reset``: ``position_preview``, ``position_reset``;
- ``trim``: ``trim_preview``, ``stream_trim``;
- ``retire``: ``consumer_retire``, ``idle_consumers_find``, ``idle_consumers_retire``.

Each write is guarded and atomic where it checks before it acts: one Lua script from
``queue_core.scripts`` (``retire``, ``retire_idle``, ``group_create``, ``group_delete``,
``position_reset``, ``stream_trim``), every key in the stream's slot, so it works on
Redis Cluster. Work that could block Redis long is cut in chunks the caller loops over
(``RETIRE_CHUNK`` pending entries, ``TRIM_CHUNK`` entries), each chunk re-checking its
guard. A refused guard raises ``Refused`` (an ``ActionRefused``: the dashboard answers
409 with its message), except ``consumer_retire``, which reports its refusal in
``Retired.refused``; a malformed position or id raises ValueError before Redis is asked.
Every write that changed something publishes an ``action`` event, as
``queue_core.services`` does, so open pages update.

Previews and dry runs (``idle_consumers_find``, ``position_preview``, ``trim_preview``)
read only. Counting entries walks ``XRANGE`` in pages of ``PAGE`` ids up to a budget
(``COUNT_BUDGET``): exact below it, "more than N" (``exact=False``) beyond it, never an
estimate passed off as a count. ENTRIESREAD (Redis 7+) is set only when the count of
entries up to the position is known (see ``entries_read_at``); on Redis 6.2 it is left
out and the lag is reported unknown (None).

Heartbeats are the workers' (``stream_keys(S).workers(group)``, written by
``queue_core.control``'s worker side): live while ``now_ms - seen_ms <=
HEARTBEAT_STALE_MS`` and without ``stopped_ms`` (the last heartbeat of a worker that
stopped: never live, and its consumer is not taken for a live one without a heartbeat
either). ``now_ms`` is always the caller's clock, passed to the scripts, so a heartbeat
is judged by one clock. Never imports Django, never decides permissions or
writes audit rows (the dashboard does).

This package re-exports the public names of its modules; the constants are the modules'
own, so patch a budget in the module that reads it (``reads.COUNT_BUDGET``).
"""

from queue_core.admin.groups import GroupCreated, GroupDeleted, group_create, group_delete
from queue_core.admin.positions import Position, position_parse
from queue_core.admin.reads import COUNT_BUDGET, PAGE, entries_read_at
from queue_core.admin.reset import PositionDiff, position_preview, position_reset
from queue_core.admin.retire import (
    RETIRE_CHUNK,
    RETIRE_DUE_IDLE_MS,
    RETIRE_PASSES,
    Retired,
    consumer_retire,
    idle_consumers_find,
    idle_consumers_retire,
)
from queue_core.admin.shared import SEEN_WITHIN_MS, Refused
from queue_core.admin.trim import TRIM_CHUNK, Trimmed, TrimPlan, stream_trim, trim_preview
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.services import PARKING_CONSUMER

__all__ = [
    "COUNT_BUDGET",
    "HEARTBEAT_STALE_MS",
    "PAGE",
    "PARKING_CONSUMER",
    "RETIRE_CHUNK",
    "RETIRE_DUE_IDLE_MS",
    "RETIRE_PASSES",
    "SEEN_WITHIN_MS",
    "TRIM_CHUNK",
    "GroupCreated",
    "GroupDeleted",
    "Position",
    "PositionDiff",
    "Refused",
    "Retired",
    "TrimPlan",
    "Trimmed",
    "consumer_retire",
    "entries_read_at",
    "group_create",
    "group_delete",
    "idle_consumers_find",
    "idle_consumers_retire",
    "position_parse",
    "position_preview",
    "position_reset",
    "stream_trim",
    "trim_preview",
]

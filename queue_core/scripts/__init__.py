"""The Lua scripts beside this file, one binding each.

Every write that checks before it acts, or touches two keys, is one of these scripts,
so it is atomic. ``<name>.lua`` opens with its KEYS, ARGV and every refusal it returns;
``<name>.py`` beside it is its binding: the one place that builds its keys and args and
parses its reply (``binding.py`` says how they run). Keys reach a script only through
KEYS, which keeps every script cluster-safe, and the dead-letter metadata names only
through ARGV (``queue_core.keys``).

Services (``queue_core.services``, ``queue_core.bulk``) and the worker use these
bindings; nothing else runs a script.
"""

from queue_core.scripts.acknowledge import ACKNOWLEDGE
from queue_core.scripts.binding import Refusal, ScriptCall, calls_pipelined
from queue_core.scripts.claim import CLAIM
from queue_core.scripts.dead_letter import DEAD_LETTER
from queue_core.scripts.dlq_delete import DLQ_DELETE
from queue_core.scripts.dlq_purge import DLQ_PURGE
from queue_core.scripts.dlq_replay import DLQ_REPLAY
from queue_core.scripts.retry import RETRY

__all__ = [
    "ACKNOWLEDGE",
    "CLAIM",
    "DEAD_LETTER",
    "DLQ_DELETE",
    "DLQ_PURGE",
    "DLQ_REPLAY",
    "RETRY",
    "Refusal",
    "ScriptCall",
    "calls_pipelined",
]

"""Live updates: pages that change in the browser without a reload.

- ``registry``: each kind of live page (template, partials, context, URL, socket path and
  what makes it change), declared once;
- ``broadcaster``: one per web process; polls open streams, renders changed surfaces once
  per permission set and pushes them;
- ``render``: a surface's partials for a permission set, with no per-user state;
- ``outbox``: what each socket has yet to send (the newest HTML per partial, so a slow
  socket skips states for itself alone);
- ``consumers`` and ``session``: the sockets, and how long their authorization lasts (one
  batched check per process per recheck, one logout subscription per session);
- ``logs``: the once-a-minute rule for problems that repeat.

Routes are in ``dashboard.routing``. Nothing here writes to Redis.
"""

"""Redrive: put a stream's dead letters back, filtered, canaried and throttled.

``models`` (RedriveJob), ``selection`` (which dead letters a filter picks, and the dry
run's count), ``runner`` (the background loop of ``manage.py run_jobs``: lease, token
bucket, the atomic replay script), ``service`` (create and control a job: the one place
the buttons, ``manage.py ackboard redrive`` and the JSON API go through: permission,
input checks, audit row), ``canary`` (the canary entries' outcomes), ``views`` and
``cli``.
"""

"""Rates, history and the drain estimate.

- ``models``: the ``RateSample`` history table, its tiers and why it lives in the database;
- ``sampler``: the one sampler per deployment (a Redis lease), its tick, the downsampling
  and retention, and the thread web processes run;
- ``series``: what pages and charts read (``series``, ``drain_estimate``, ``latest_point``);
- ``metrics``: the /metrics counters and the lag-in-time gauge.
"""

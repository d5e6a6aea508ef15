"""Alerts without Prometheus: Ackboard judges the shipped alert rules itself and posts
each breach to the webhooks configured in the admin (``manage.py send_alerts``)."""

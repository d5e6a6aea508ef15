"""What every dashboard process runs on.

Its Redis client (``connection``), the request middleware (``middleware``), logging
filters (``log_filters``), the SQLite engine (``sqlite3``), the web server's command line
(``serve``) and stop signals for command loops (``stop_signals``).
"""

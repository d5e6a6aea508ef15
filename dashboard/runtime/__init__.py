"""What every dashboard process runs on.

Its Redis client (``connection``), the request middleware (``middleware``), logging that
says a repeated problem once (``log_filters``, ``logs``), the web server's command line
(``serve``) and stop signals for command loops (``stop_signals``).
"""

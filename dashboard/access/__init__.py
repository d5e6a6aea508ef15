"""Access: who may do what, and the record of what they did.

Permissions and the read role (``permissions``), per-user API tokens (``api_tokens``),
the WebSocket Origin check (``origin``), the login throttle's client address
(``login_throttle``) and the audit trail (``audit``).
"""

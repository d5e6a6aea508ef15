"""How the pages write what they show, for every layer to share.

Names in URLs (``converters``), durations (``durations``), payload decoders
(``decoders``), stream-name patterns (``stream_patterns``) and the redaction rules per
stream pattern (``redact_rules``). Nothing here reads Redis, SQL or a request.
"""

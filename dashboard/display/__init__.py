"""How the pages write what they show, for every layer to share.

Names in URLs (``converters``) and durations (``durations``). Nothing here reads Redis,
SQL or a request.
"""

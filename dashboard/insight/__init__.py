"""What the pages know beyond Redis's own replies.

The failure index (``failure_index``), the rates history (``rates``), a group's fleet
(``fleet``), the overview's stream index (``stream_index``) and the health verdict built
from them (``health``).
"""

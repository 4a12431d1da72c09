"""gputopo: which GPU pairs of this machine can you trust, and how fast are they?

Importing this package must stay cheap: no torch, pandas or matplotlib at import time
(``gputopo --help`` and ``gputopo scan`` are held to sub-second budgets).
"""

__version__ = "0.1.0"

#: Version of every JSON document gputopo writes; bump on an incompatible change.
SCHEMA_VERSION = 1

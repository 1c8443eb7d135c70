"""The limits of names and arguments, defined once (PROTOCOL.md).

The verbs' argument checks (:mod:`daemon.verbs.args`: the attrs validators and
the hot verbs' fast checks), the wide-integer check of the transports
(:mod:`daemon.transport.wide_ints`), the config file (:mod:`daemon.config`),
the budget-spec parser (:mod:`actors.budget`) and the CLI's argument types all
read their bounds here, so a limit changes in one place. Standard library only:
the client imports it too.

Integer ranges are ``(lo, hi)`` pairs, both ends included.
"""

from __future__ import annotations

import re

#: A namespace, queue, job type, budget key or periodic name.
NAME_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: How the name rule reads in messages.
NAME_RULE = "1-128 characters of [A-Za-z0-9._:-]"

#: A job's fairness group: 1-128 bytes of UTF-8 without control characters
#: (it is also a metric label and a CLI argument).
GROUP_BYTES = 128
GROUP_RULE = "1-128 bytes of UTF-8 without control characters"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def valid_group(value: object) -> bool:
    """Whether ``value`` is a group name (:data:`GROUP_RULE`)."""
    if type(value) is not str or not value or len(value) > GROUP_BYTES:
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return size <= GROUP_BYTES and _CONTROL.search(value) is None


#: The latest instant an argument may name (9999-12-31T23:59:59.999Z), and the
#: longest duration (100 years): far beyond any schedule, well inside the
#: store's 64-bit integers once added to now.
MAX_INSTANT_MS = 253_402_300_799_999
MAX_DURATION_MS = 3_155_760_000_000

#: The integers a request may carry anywhere (payloads, results, arguments):
#: what orjson reads and writes exactly.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1

#: A job's priority (lower runs first) and its default.
PRIORITY = (0, 65535)
DEFAULT_PRIORITY = 32768
#: Attempts a job may be given, and the default.
MAX_ATTEMPTS = (1, 100_000)
DEFAULT_MAX_ATTEMPTS = 25
#: A lease a job or a claim may ask for (ms): up to a day.
LEASE_MS = (1, 86_400_000)
#: The longest ``unique_key``, job id and lease token.
UNIQUE_KEY_LEN = 255
JOB_ID_LEN = 64
LEASE_TOKEN_LEN = 64
#: The longest error text ``fail`` stores.
ERROR_LEN = 65_536

#: Jobs one ``enqueue_many`` carries, completions one ``complete_many`` carries.
MAX_BATCH = 1000
MAX_COMPLETIONS = 1000
#: Queues one ``claim_next`` names, and jobs it takes at most.
CLAIM_QUEUES = (1, 100)
CLAIM_MAX = (1, 1000)
#: The longest a ``claim_next`` waits (ms).
MAX_WAIT_MS = 3_600_000

#: Seed 003: allocations, bursts, durations and costs of budgets are int32.
MAX_TOKENS = 2**31 - 1
#: The longest a ``budget_pause`` may hold a budget (ms): a week; and its reason's length.
MAX_PAUSE_MS = 604_800_000
PAUSE_REASON_LEN = 1000
#: Budgets one job binds to at most.
MAX_BINDINGS = 16
#: Levels of nesting orjson encodes at most.
ENCODE_DEPTH = 254
#: Levels an answer wraps a stored value in (``{"jobs": [{"job": {"payload": ...}}]}``
#: is 4), with room to spare.
ANSWER_ENVELOPE = 6
#: Levels a stored value (a payload, a result) may have, so that every answer can carry it.
VALUE_DEPTH = ENCODE_DEPTH - ANSWER_ENVELOPE

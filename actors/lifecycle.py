"""The job state machine.

Rules:

- ``scheduled``: waiting for ``ready_at``; the delay timer makes it ``pending``.
- ``pending``: claimable now, ordered by priority, then ``ready_at``, then id.
- ``running``: claimed under a lease; ``attempts`` counts claims.
- ``completed`` and ``dead`` are final, except that a dead letter may be
  replayed back to ``pending``.

Every transition a verb or an actor makes is one row of :data:`TRANSITIONS`;
an illegal one raises :class:`IllegalTransition` and changes nothing. The store
enforces it on every transition (claim, heartbeat, complete, fail, release,
reap, fold, replay; promote's statement moves only the states :func:`sources`
names), checking the row it is given before any statement runs.
"""

from __future__ import annotations

import random
from typing import Final

SCHEDULED: Final = "scheduled"
PENDING: Final = "pending"
RUNNING: Final = "running"
COMPLETED: Final = "completed"
DEAD: Final = "dead"

STATES: Final = (SCHEDULED, PENDING, RUNNING, COMPLETED, DEAD)
#: States in which a job holds its unique key and counts as live work.
LIVE: Final = frozenset({SCHEDULED, PENDING, RUNNING})

#: (event, from) -> possible targets. The event names the verb or actor.
TRANSITIONS: Final[dict[tuple[str, str], frozenset[str]]] = {
    ("promote", SCHEDULED): frozenset({PENDING}),
    ("fold", SCHEDULED): frozenset({SCHEDULED}),
    ("fold", PENDING): frozenset({SCHEDULED}),
    ("claim", PENDING): frozenset({RUNNING}),
    ("heartbeat", RUNNING): frozenset({RUNNING}),
    ("complete", RUNNING): frozenset({COMPLETED}),
    ("fail", RUNNING): frozenset({SCHEDULED, PENDING, DEAD}),
    ("release", RUNNING): frozenset({PENDING, SCHEDULED}),
    ("reap", RUNNING): frozenset({PENDING, DEAD}),
    ("replay", DEAD): frozenset({PENDING}),
}


class IllegalTransition(Exception):
    """A transition that :data:`TRANSITIONS` does not allow."""


def check(event: str, source: str, target: str) -> str:
    """Return ``target`` if ``event`` may move a job from ``source`` to it."""
    if target not in TRANSITIONS.get((event, source), ()):
        raise IllegalTransition(f"{event}: {source} -> {target} is not allowed")
    return target


def sources(event: str, target: str) -> tuple[str, ...]:
    """The states ``event`` may move a job from to ``target``, in :data:`STATES`
    order: the guard of a statement that moves many jobs at once (promote)."""
    return tuple(s for s in STATES if target in TRANSITIONS.get((event, s), ()))


def arrival_state(ready_at: int, now_ms: int) -> str:
    """The state of a job that becomes live with ``ready_at`` at ``now_ms``."""
    return SCHEDULED if ready_at > now_ms else PENDING


#: Retry backoff: the first retry waits about BASE_MS, doubling up to CAP_MS.
BACKOFF_BASE_MS: Final = 1_000
BACKOFF_CAP_MS: Final = 3_600_000


def backoff_ms(attempts: int, rng: random.Random | None = None) -> int:
    """The delay before retry number ``attempts`` (>= 1): exponential, equal jitter.

    Half of the exponential delay is fixed and half random, so retries of jobs
    that failed together spread out but never come back sooner than half the
    nominal delay (Sidekiq and Oban use the same shape).
    """
    nominal = min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** max(0, min(attempts - 1, 30)))
    half = nominal // 2
    return half + (rng or random).randint(0, nominal - half)

"""Failpoints: named places where a test makes the daemon crash (fail-rs, FoundationDB).

Compiled in, armed only by ``SLUICEGATE_FAILPOINTS``, read once at import. With
the variable unset, :data:`ARMED` is False and every call site is ``if
failpoints.ARMED: failpoints.hit(NAME)``: one global read, nothing else.

The variable holds ``name=action`` items separated by ``,``:

- ``name=exit``: the process exits at the point's first hit (``os._exit``, no
  cleanup, no flush: as ``kill -9`` would leave it);
- ``name=exit@N``: at its Nth hit (the first N-1 pass);
- ``name=on``: a broken mode (:func:`broken`), for tests that show a harness
  catches what it is for. Never set outside those tests.

Points (:data:`POINTS`) and broken modes (:data:`BROKEN`) are named here once;
an unknown name in the variable is refused at import (a typo arms nothing).
"""

from __future__ import annotations

import os
import sys

ENV_VAR = "SLUICEGATE_FAILPOINTS"
#: The exit status of a process a failpoint ended (tests tell it from a crash).
EXIT_STATUS = 86

#: Where the daemon may be made to exit, and where each is.
POINTS = {
    # daemon.store.database.GroupCommit: the writes ran, COMMIT not issued.
    "commit_before": "a group transaction's writes ran; before its COMMIT",
    # GroupCommit: COMMIT done, no write of it answered yet.
    "commit_after_before_reply": "after a group COMMIT, before any of its answers",
    # daemon.transport.connection: a claim committed, its answer not yet queued.
    "claim_after_commit_before_send": "a claim's answer, after its commit, before the send",
    # daemon.retention: the first delete of a TTL window done, its transaction open.
    "retention_mid_batch": "inside a retention batch, after a delete, before its commit",
    # daemon.admission.budget_gate: a job's budgets debited in memory, not yet claimed.
    "budget_debit_before_claim": "between a budget debit and the claim's row update",
}
#: Broken modes: wrong behaviour a harness must catch (docs/reliability.md).
BROKEN = {
    # GroupCommit answers a transaction's writes, then waits, then commits.
    "ack_before_commit": "answers every write before its COMMIT (and commits 20 ms later)",
    # daemon.admission.timers: a claim takes back running jobs whatever their lease.
    "claim_skips_lease_check": "a claim reaps every running job, live leases too",
}


def _parse(text: str) -> tuple[dict[str, int], frozenset[str]]:
    """``name=exit[@N]`` and ``name=on`` items: (exit point -> hit, broken modes)."""
    exits: dict[str, int] = {}
    broken: set[str] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, action = item.partition("=")
        if not sep:
            raise ValueError(f"{ENV_VAR}: {item!r} is not name=action")
        if name in BROKEN and action == "on":
            broken.add(name)
            continue
        if name not in POINTS:
            known = ", ".join(sorted(POINTS) + sorted(BROKEN))
            raise ValueError(f"{ENV_VAR}: unknown failpoint {name!r} (known: {known})")
        kind, _, nth = action.partition("@")
        if kind != "exit" or (nth and not nth.isdigit()) or nth == "0":
            raise ValueError(f"{ENV_VAR}: {item!r}: the action is exit or exit@N (N >= 1)")
        exits[name] = int(nth or 1)
    return exits, frozenset(broken)


_EXITS, _BROKEN = _parse(os.environ.get(ENV_VAR, ""))
#: Whether any failpoint or broken mode is armed: the call sites' only cost when off.
ARMED = bool(_EXITS or _BROKEN)
_hits: dict[str, int] = {}


def hit(name: str) -> None:
    """Pass failpoint ``name``: exit the process if it is armed and this is its hit."""
    at = _EXITS.get(name)
    if at is None:
        return
    n = _hits[name] = _hits.get(name, 0) + 1
    if n >= at:
        sys.stderr.write(f"failpoint {name}: exit (hit {n})\n")
        sys.stderr.flush()
        os._exit(EXIT_STATUS)


def broken(name: str) -> bool:
    """Whether broken mode ``name`` is armed."""
    return name in _BROKEN

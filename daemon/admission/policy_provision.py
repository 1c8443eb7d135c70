"""Provisioned queue policies: the config file's ``[policies.<ns>.<queue>]`` tables
made true in the store, at start and at every SIGHUP.

- A table is decoded at load by the API's own decoder
  (:func:`actors.policy.parse_policy`, see ``daemon/config.py``) and written
  with actor ``config`` and ``source = "config"``, audited like any write. It
  is then read-only through the API: ``policy_set`` and ``policy_clear`` answer
  ``conflict``.
- A table that does not decode is stored as it is, so its queue fails closed
  (``admission_unavailable``, seed 002 REQ-9) exactly as a bad stored policy
  does, until the file is fixed; no other queue is affected. ``sluice config
  check`` exits 1 naming ``policies.<ns>.<queue>.<field>``; ``/healthz`` is
  degraded meanwhile.
- A policy that left the file is kept and becomes the API's again (as a
  provisioned budget does), so an operator can clear it.
- A table already stored as it is writes nothing: a SIGHUP that changes no
  table leaves no audit record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from actors.errors import Refused
from actors.policy import Policy, PolicyState, parse_policy
from daemon.store.interface import Tx

if TYPE_CHECKING:
    from daemon.admission.policies import Policies

log = logging.getLogger("sluicegate.policies")
ACTOR = "config"


def provision(
    policies: Policies, tables: Mapping[tuple[str, str], tuple[Policy | None, Any]]
) -> Callable[[Tx], None]:
    """The write that makes the config file's policy tables (``config.policy_tables``)
    true in the store, through ``policies``."""

    def write(tx: Tx) -> None:
        stored = {(r[0], r[1]): (r[2], r[7]) for r in tx.store.policies.all_policies()}
        for key, state in sorted(policies.states.items()):
            if state.source != "config" or key in tables:
                continue
            if state.policy is not None:  # left the file: the API's again
                policies.put(tx, key[0], key[1], state.policy, ACTOR, source="api")
            elif key in stored:
                text = stored[key][0]
                _store_raw(policies, tx, key, _raw(text), text, state.broken or "", "api")
        for key, (policy, raw) in sorted(tables.items()):
            text, source = stored.get(key, (None, None))
            if policy is not None:
                wanted = orjson.dumps(policy.to_dict()).decode()
                if (text, source) != (wanted, "config") or key not in policies.states:
                    policies.put(tx, key[0], key[1], policy, ACTOR, source="config")
                continue
            wanted = orjson.dumps(raw, default=str).decode()
            if (text, source) != (wanted, "config") or key not in policies.states:
                _store_raw(policies, tx, key, raw, wanted, _why(raw), "config")

    return write


def _why(raw: Any) -> str:
    try:
        parse_policy(raw)
    except Refused as exc:
        return exc.message
    return "the policy does not decode"  # pragma: no cover - config.py decoded it


def _raw(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _store_raw(policies: Policies, tx: Tx, key: tuple[str, str], raw: Any, text: str,
               error: str, source: str) -> None:  # fmt: skip
    """Store a policy that does not decode as it is: its queue fails closed."""
    namespace, queue = key
    old = policies.states.get(key)
    state = PolicyState(namespace, queue)
    state.broken = error
    state.created_at = old.created_at if old is not None else tx.now_ms
    state.created_by = old.created_by if old is not None else ACTOR
    state.updated_at, state.updated_by, state.source = tx.now_ms, ACTOR, source
    state.in_flight_delta = old.in_flight_delta if old is not None else 0
    state.last_label = old.last_label if old is not None else "admitted"
    tx.store.policies.save((namespace, queue, text, state.created_at, state.updated_at,
                            state.created_by, state.updated_by, source))  # fmt: skip
    tx.store.audit.record(
        at=tx.now_ms, actor=ACTOR, namespace=namespace, target_kind="queue",
        target=queue, action="set_policy",
        before=None if old is None else policies.describe_policy(old),
        after={"queue": queue, "raw": raw, "error": error, "source": source},
    )  # fmt: skip
    policies.states[key] = state

    def undo() -> None:
        if old is None:
            policies.states.pop(key, None)
        else:
            policies.states[key] = old

    def after() -> None:
        log.error("policy of queue %r/%r from the config file cannot be evaluated, "
                  "failing closed: %s", namespace, queue, error)  # fmt: skip
        policies.refresh(key)

    tx.undo(undo)
    tx.after(after)

"""Quotas: ``quota_get`` (``manage``), ``quota_set`` and ``quota_clear`` (``operator``).

The namespace is the token's unless an operator names another (the dispatcher
checks that). A document from the config file is read-only here (``conflict``).
Every write is audited with target kind ``namespace``, before and after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from actors.errors import Refused
from actors.quota import parse_quota
from daemon.admission import quotas
from daemon.store.interface import Tx
from daemon.verbs.table import Call, NoArgs, Plan, answer_now, verb

if TYPE_CHECKING:
    from daemon.services import Services


@attrs.frozen
class QuotaSetArgs:
    quota: Any


def _writable(core: Services, namespace: str) -> None:
    if namespace in core.config.quota_tables:
        raise Refused("conflict", f"the quota of namespace '{namespace}' is managed by config file")


def _source(core: Services, namespace: str, present: bool) -> str | None:
    """``config`` for a document the config file wrote (even one that does not
    decode), ``api`` for one set through the API."""
    if not present:
        return None
    if namespace in core.config.quota_tables or namespace in quotas.provisioned(
        core.store.settings
    ):
        return "config"
    return "api"


@verb("quota_get", ("manage",), NoArgs)
def quota_get(core: Services, call: Call, _a: NoArgs) -> Plan:
    """The namespace's document (``null`` if none), where it comes from, and why it
    cannot be used if it does not decode."""
    namespace = call.namespace
    doc, error = quotas.stored(core.store.settings, namespace)
    present = doc is not None or error is not None
    out: dict[str, Any] = {"quota": doc, "source": _source(core, namespace, present)}
    if error is not None:
        out["error"] = error
    return answer_now(out)


@verb("quota_set", ("operator",), QuotaSetArgs)
def quota_set(core: Services, call: Call, a: QuotaSetArgs) -> Plan:
    """Replace the namespace's document."""
    quota = parse_quota(a.quota)
    namespace = call.namespace
    _writable(core, namespace)

    def write(tx: Tx) -> dict[str, Any]:
        core.quotas.write(tx, call.actor, namespace, quota)
        return {"quota": quota.to_dict()}

    return Plan(write)


@verb("quota_clear", ("operator",), NoArgs)
def quota_clear(core: Services, call: Call, _a: NoArgs) -> Plan:
    """Remove the namespace's document: no limits."""
    namespace = call.namespace
    _writable(core, namespace)

    def write(tx: Tx) -> dict[str, Any]:
        core.quotas.write(tx, call.actor, namespace, None)
        return {}

    return Plan(write)

"""The namespace quota document (seed 000, with seed 001's door limits).

One document per namespace bounds how many jobs wait (``max_pending``), how
fast they arrive (``enqueue_rate``), how many run at once (``max_running``)
and how many finished or dead rows are kept. Every field is optional: unset is
unlimited, zero is a real limit, a negative value is refused. The door limits
of seed 001 (``request_rate``, ``max_item_bytes``, ...) are fields of the same
document.

:func:`parse_quota` is the one decoder, for the wire, the settings store and
the config file alike; a bad field is ``invalid_argument`` naming it.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

import attrs

from actors.budget import TIME_BASED, BudgetSpec, Strategy
from actors.errors import invalid
from actors.shadow import parse_enforce

_RATE = re.compile(r"^([0-9]+)/(s|m|h)$")
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000}
#: The largest count any limit takes (int64, as seed 000's backends store it).
MAX_LIMIT = 2**63 - 1


@attrs.frozen
class Rate:
    """``<count>/<unit>``: a bucket of ``count`` tokens refilled ``count`` per unit."""

    count: int
    unit: str

    @property
    def per_ms(self) -> int:
        """The unit in milliseconds."""
        return _UNIT_MS[self.unit]

    def bucket(self) -> BudgetSpec:
        """The token pool of this rate: a ``time_based`` budget of ``count`` per unit."""
        return BudgetSpec(self.count, Strategy(TIME_BASED, self.per_ms))

    def __str__(self) -> str:
        return f"{self.count}/{self.unit}"


@attrs.frozen
class Bucket:
    """A door bucket (seed 001): ``capacity`` tokens, refilled ``refill_per_s``."""

    capacity: int
    refill_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "refill_per_s": self.refill_per_s}


_COUNTS = (
    "max_pending", "max_running", "max_archived_rows", "max_dead_rows", "max_item_bytes",
    "max_queues", "max_retention_ms", "max_waiting_claims", "max_retained_bytes",
    "monthly_jobs_quota",
)  # fmt: skip


@attrs.frozen
class Quota:
    """A namespace's quota document; ``None`` is unlimited."""

    max_pending: int | None = None
    on_excess: Literal["reject", "drop"] = "reject"
    enqueue_rate: Rate | None = None
    max_running: int | None = None
    max_archived_rows: int | None = None
    max_dead_rows: int | None = None
    # Seed 001's door limits (enforced by the door).
    request_rate: Bucket | None = None
    message_rate: Bucket | None = None
    max_item_bytes: int | None = None
    max_queues: int | None = None
    max_retention_ms: int | None = None
    max_waiting_claims: int | None = None
    max_retained_bytes: int | None = None
    retained_release_band: float | None = None
    monthly_jobs_quota: int | None = None
    #: False: shadow mode for the whole document (actors.shadow): its limits are
    #: evaluated, logged and counted, and hold nothing back (hard limits excepted).
    enforce: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The document as stored and shown: only the fields that are set
        (``on_excess`` always; ``enforce`` only when false)."""
        out: dict[str, Any] = {}
        for field in attrs.fields(Quota):
            value = getattr(self, field.name)
            if value is None or value is True:
                continue
            if isinstance(value, Rate):
                value = str(value)
            elif isinstance(value, Bucket):
                value = value.to_dict()
            out[field.name] = value
        return out

    @property
    def empty(self) -> bool:
        """No limit set at all."""
        return self == Quota(on_excess=self.on_excess)


def parse_rate(value: Any, field: str = "enqueue_rate") -> Rate:
    """``"500/s"`` -> :class:`Rate`; unit ``s``, ``m`` or ``h``, count at least 1."""
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or int(match[1]) < 1:
        raise invalid(
            field, f"{field} must be <count>/<unit> with a count of at least 1 and unit s, m "
            f"or h (e.g. 500/s), got {value!r}",
        )  # fmt: skip
    return Rate(int(match[1]), match[2])


def _count(field: str, value: Any) -> int:
    if type(value) is not int:
        raise invalid(field, f"{field} must be an integer, got {value!r}")
    if value < 0:
        raise invalid(field, f"{field} cannot be negative, got {value}")
    if value > MAX_LIMIT:
        raise invalid(field, f"{field} is too large")
    return value


def _bucket(field: str, value: Any) -> Bucket:
    if not isinstance(value, dict) or set(value) != {"capacity", "refill_per_s"}:
        raise invalid(field, f"{field} must be {{capacity, refill_per_s}}")
    capacity = _count(f"{field}.capacity", value["capacity"])
    refill = value["refill_per_s"]
    if type(refill) not in (int, float) or not 0 <= refill < math.inf:
        raise invalid(f"{field}.refill_per_s", f"{field}.refill_per_s must be a number >= 0")
    return Bucket(capacity, float(refill))


def parse_quota(doc: Any) -> Quota:
    """Decode a quota document; ``invalid_argument`` naming the first bad field."""
    if not isinstance(doc, dict):
        raise invalid("quota", "a quota document is an object")
    known = {f.name for f in attrs.fields(Quota)}
    for name in doc:
        if name not in known:
            raise invalid(name, f"unknown quota field {name!r}")
    values: dict[str, Any] = {}
    for name, value in doc.items():
        if value is None:
            continue
        if name in _COUNTS:
            values[name] = _count(name, value)
        elif name == "on_excess":
            if value not in ("reject", "drop"):
                raise invalid(name, f"on_excess must be reject or drop, got {value!r}")
            values[name] = value
        elif name == "enqueue_rate":
            values[name] = parse_rate(value)
        elif name in ("request_rate", "message_rate"):
            values[name] = _bucket(name, value)
        elif name == "enforce":
            values[name] = parse_enforce(value)
        elif name == "retained_release_band":
            if type(value) not in (int, float) or not 0 <= value <= 1:
                raise invalid(name, "retained_release_band must be a fraction from 0 to 1")
            values[name] = float(value)
    return Quota(**values)

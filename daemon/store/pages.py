"""Keyset pagination: the one way listings filter and page, in id order."""

from __future__ import annotations

from typing import Any


def page_query(
    select: str, namespace: str, filters: dict[str, Any], after: Any, limit: int
) -> tuple[str, list[Any]]:
    """``select`` (``SELECT ... FROM t``) for ``namespace``, the non-None
    ``filters`` (column -> value), ids after the cursor ``after``, ``limit`` rows."""
    where = ["namespace = ?"]
    params: list[Any] = [namespace]
    for column, value in filters.items():
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if after is not None:
        where.append("id > ?")
        params.append(after)
    params.append(limit)
    return f"{select} WHERE {' AND '.join(where)} ORDER BY id LIMIT ?", params

"""One write's view of a group transaction (:class:`Tx`), and a queued write
(:class:`Write`), as :class:`~daemon.store.database.GroupCommit` runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.store.sqlite import SqliteStore


class Tx:
    """One write's view of the open transaction
    (:class:`~daemon.store.interface.Transaction`): ``store`` to read and write
    through, ``now_ms``, and the write's effects on memory."""

    __slots__ = ("_after", "_undo", "conn", "now_ms", "shared", "store")

    def __init__(self, store: SqliteStore, now_ms: int, shared: bool = False) -> None:
        self.store = store
        #: A share-mode transaction (daemon.admission.cluster): it holds the
        #: cluster's epoch lock beside others, so its writes move nothing a
        #: limit counts (a claim's catch-up leaves due timers to their own writes).
        self.shared = shared
        #: SQLite's connection, for this package and white-box tests only.
        self.conn = store.conn
        self.now_ms = now_ms
        self._after: list[Callable[[], None]] = []
        self._undo: list[Callable[[], None]] = []

    def after(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once the transaction has committed (never if not)."""
        self._after.append(effect)

    def undo(self, inverse: Callable[[], None]) -> None:
        """Run ``inverse`` if this write's statements are rolled back.

        For memory a write changed at once; inverses run newest first.
        """
        self._undo.append(inverse)

    def rolled_back(self) -> None:
        """This write's statements were undone: undo its memory changes too."""
        while self._undo:
            self._undo.pop()()
        self._after.clear()


#: Called once a write is settled: (result, None) after its commit, or (None, error).
Done = Callable[[Any, BaseException | None], None]


#: Whether a write decides no limit, asked of memory as it joins a transaction
#: (daemon.admission.limit_free); None: it may decide one.
Free = Callable[[], bool] | None


class Write:
    __slots__ = ("done", "error", "fn", "free", "result", "tx", "withdrawn")

    # ``tx`` is set while the write's effects stand: after it ran without
    # error, until its transaction commits or rolls back.

    def __init__(self, fn: Callable[[Tx], Any], done: Done, free: Free = None) -> None:
        self.fn = fn
        self.done = done
        self.free = free
        self.result: Any = None
        self.error: BaseException | None = None
        self.tx: Tx | None = None
        self.withdrawn = False

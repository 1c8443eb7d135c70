"""The operator board: server-rendered pages over the verb table.

:mod:`daemon.board.app` builds the Starlette app that
:class:`daemon.http_app.HttpApp` hands ``GET /`` and ``/board/...`` to. This
package's ``__init__`` imports nothing, so the core can use
:mod:`daemon.board.history` without loading the web stack.
"""

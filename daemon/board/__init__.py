"""The operator board: server-rendered pages over the verb table.

:mod:`daemon.board.app` builds the Starlette app that
:class:`daemon.transport.http_app.HttpApp` hands ``GET /`` and ``/board/...`` to.
Its pictures draw on :mod:`actors.history`, which the core keeps. This
package's ``__init__`` imports nothing.
"""

"""The transports: the unix-socket server and the HTTP server, and what they share.

The socket side is :mod:`~daemon.transport.socket_server` (the listener),
:mod:`~daemon.transport.connection` (one client's reader and writer) and
:mod:`~daemon.transport.framing` (the sans-IO frame codec). The HTTP side is
:mod:`~daemon.transport.http_server` (hypercorn), :mod:`~daemon.transport.http_app`
(routes), :mod:`~daemon.transport.http_guard` (headers, cross-site refusal) and
:mod:`~daemon.transport.http_body` (request bodies). Both read integers wider than
64 bits the same way (:mod:`~daemon.transport.wide_ints`).

A transport turns bytes into calls of the verb table (:mod:`daemon.dispatch`) and
answers back into bytes; it never reaches the store itself. This ``__init__``
imports nothing, so a client may use :mod:`~daemon.transport.wide_ints` without
loading the servers.
"""

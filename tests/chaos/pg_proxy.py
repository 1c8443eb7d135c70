"""A TCP proxy between a daemon and PostgreSQL that can lose a COMMIT's answer.

The one fault no other harness here can aim at: a ``COMMIT`` that reaches the
server, which commits it, and whose answer never comes back (the connection
breaks in between, as a server crash or a network cut a moment later would do).
:meth:`CommitCutter.cut` arms the proxy: the next simple-protocol ``COMMIT`` a
client sends is forwarded, given :data:`SETTLE_S` to be committed, and then
both sides of that connection are closed, its answer unsent. With
``before=True`` the connection is cut instead of forwarding the ``COMMIT``:
the server never sees it, and rolls the transaction back.

Only the frontend's messages are read (a startup message, then ``type, length,
body``), so the DSN through it must not use TLS (``sslmode=disable``).
Loopback only; every thread ends with :meth:`CommitCutter.close`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

#: How long the server is given to commit a forwarded COMMIT before the cut.
SETTLE_S = 0.05
_COMMIT = b"Q" + struct.pack("!i", 4 + len(b"COMMIT\0")) + b"COMMIT\0"


class CommitCutter:
    """Listens on 127.0.0.1 (:attr:`port`) and forwards to ``upstream``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # accept() looks at _closing this often
        self.port: int = self._listener.getsockname()[1]
        self._armed = 0
        self._before = False
        #: COMMITs whose answers were cut.
        self.cuts = 0
        self._lock = threading.Lock()
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def cut(self, times: int = 1, before: bool = False) -> None:
        """Cut the answers of the next ``times`` COMMITs (any connection);
        ``before``: cut before the COMMIT reaches the server."""
        with self._lock:
            self._armed += times
            self._before = before

    def close(self) -> None:
        """Stop accepting, close every connection, end every thread."""
        self._closing = True
        self._threads[0].join(5)
        self._listener.close()
        for sock in list(self._sockets):
            _close(sock)
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            server = socket.create_connection(self.upstream)
            for sock in (client, server):  # small messages: no Nagle delay
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            cut = threading.Event()  # set: the server's bytes are no longer passed on
            for target, args in ((self._frontend, (client, server, cut)),
                                 (_pump, (server, client, cut))):  # fmt: skip
                thread = threading.Thread(target=target, args=args, daemon=True)
                self._threads.append(thread)
                thread.start()

    def _frontend(self, client: socket.socket, server: socket.socket,
                  cut: threading.Event) -> None:  # fmt: skip
        """Client to server, message by message (the startup message has no type)."""
        try:
            (length,) = struct.unpack("!i", _read(client, 4))
            server.sendall(struct.pack("!i", length) + _read(client, length - 4))
            while True:
                head = _read(client, 5)
                body = _read(client, struct.unpack("!i", head[1:])[0] - 4)
                message = head + body
                if message == _COMMIT and self._take():
                    cut.set()
                    if not self._before:
                        server.sendall(message)
                        time.sleep(SETTLE_S)  # the server commits; its answer is never sent
                    _close(client)
                    _close(server)
                    return
                server.sendall(message)
        except OSError:
            pass
        _close(client)
        _close(server)

    def _take(self) -> bool:
        with self._lock:
            if self._armed <= 0:
                return False
            self._armed -= 1
            self.cuts += 1
            return True


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _pump(source: socket.socket, target: socket.socket, cut: threading.Event) -> None:
    try:
        while (chunk := source.recv(65536)) and not cut.is_set():
            target.sendall(chunk)
    except OSError:
        pass
    _close(source)
    _close(target)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()

"""A loopback proxy that cuts event streams: it relays every connection to the server, but
the first ``cuts`` event-stream responses (``GET …/events``) are closed after ``after``
bytes, mid-event, as a broken network would. For testing that a client resumes with
``Last-Event-ID``."""

from __future__ import annotations

import socket
import threading


class CuttingProxy:
    def __init__(self, upstream_port: int, *, cuts: int, after: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.cuts, self.after = cuts, after
        self.cut = 0
        self.resumed_with: list[str] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                client.close()
                upstream.close()
                return
            head += chunk
        first = head.split(b"\r\n", 1)[0].decode()
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"last-event-id:"):
                self.resumed_with.append(line.split(b":", 1)[1].strip().decode())
        cut = False
        if first.startswith("GET ") and "/events" in first:
            with self._lock:
                if self.cut < self.cuts:
                    self.cut += 1
                    cut = True
        upstream.sendall(head)
        if not cut:
            threading.Thread(
                target=self._pipe, args=(client, upstream), daemon=True
            ).start()
            self._pipe(upstream, client)
            return
        sent = 0
        while sent < self.after:
            chunk = upstream.recv(min(65536, self.after - sent))
            if not chunk:
                break
            client.sendall(chunk)
            sent += len(chunk)
        client.shutdown(socket.SHUT_RDWR)
        client.close()
        upstream.close()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

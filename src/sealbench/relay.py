"""The relay inside the sandbox: 127.0.0.1:PORT of its empty network namespace to a unix socket.

Run by the sandbox as ``python -I -S -c <this file's text> PORT SOCKET -- ARGV...`` in place
of the agent's command: it binds the loopback port first (so the agent never finds it
closed), leaves a relay process behind (reparented to the sandbox's init, in the command's
process group, so it dies with the sandbox), and execs ``ARGV`` under its own pid, so the
agent's exit status and signals are its own. Standard library only: the sandbox sees the
interpreter, not this package. It forwards bytes and understands nothing; the gateway on the
other end of the socket decides.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time

_CHUNK = 65536


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then pass the end on (a half close)."""
    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        # One side failed: both are done (the other pump's recv then ends too).
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _relay(conn: socket.socket, path: str) -> None:
    up: socket.socket | None = None
    try:
        # Without it a keep-alive request waits for the delayed ACK (about 40 ms).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(path)
        back = threading.Thread(target=_pipe, args=(up, conn), daemon=True)
        back.start()
    except (OSError, RuntimeError):  # the gateway gone, or no thread to be had: this connection only
        for sock in (up, conn):
            if sock is not None:
                sock.close()
        return
    _pipe(conn, up)
    back.join()
    up.close()
    conn.close()


def _serve(listener: socket.socket, path: str) -> None:
    # Threads and blocking sockets, not asyncio: importing asyncio costs about 0.1 s of CPU at
    # every attempt's start, which hundreds of model-bound agents at once pay on a few cores.
    # Small stacks: each thread counts against the sandbox's address-space cap.
    threading.stack_size(256 << 10)
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # out of descriptors (the agent's own doing): wait, as asyncio did
            time.sleep(0.1)
            continue
        try:
            threading.Thread(target=_relay, args=(conn, path), daemon=True).start()
        except RuntimeError:  # no thread to be had (the process cap): this connection only
            conn.close()
            time.sleep(0.01)


def main(argv: list[str]) -> None:
    port, path, sep, command = int(argv[1]), argv[2], argv[3], argv[4:]
    if sep != "--" or not command:
        sys.stderr.write("relay: usage: PORT SOCKET -- ARGV...\n")
        os._exit(2)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1024)
    child = os.fork()
    if child == 0:
        if os.fork() != 0:
            os._exit(0)
        # The grandchild, reparented to the sandbox's init: not a child the agent could wait for.
        try:
            os.closerange(3, listener.fileno())
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            _serve(listener, path)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"{command[0]}: {e.strerror}\n")
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)


if __name__ == "__main__":
    main(sys.argv)

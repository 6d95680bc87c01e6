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

import asyncio
import os
import socket
import sys

_CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(_CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


async def _relay(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # Without it a keep-alive request waits for the delayed ACK (about 40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        up_writer.close()
        writer.close()


async def _serve(listener: socket.socket, path: str) -> None:
    server = await asyncio.start_server(lambda r, w: _relay(path, r, w), sock=listener)
    async with server:
        await server.serve_forever()


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
            asyncio.run(_serve(listener, path))
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

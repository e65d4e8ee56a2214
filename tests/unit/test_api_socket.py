"""The API's listening socket (`launcher.serving.reserve_api_port`) hands asyncio connections
with Nagle's algorithm off. Its connections are served by asyncio's transports, which turn
Nagle off only for a socket that names IPPROTO_TCP; with the protocol left 0, a kept-alive
connection's response headers and body went out as two writes, and the second waited for the
client's delayed ACK: 40 ms a request once a client reused its connection."""

from __future__ import annotations

import asyncio
import socket

from launcher.serving import reserve_api_port


async def test_an_accepted_connection_sends_small_writes_at_once() -> None:
    listener = reserve_api_port("127.0.0.1", 0)
    accepted: asyncio.Future[asyncio.BaseTransport] = asyncio.get_running_loop().create_future()

    class Served(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.set_result(transport)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Served, sock=listener)
    try:
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        transport = await asyncio.wait_for(accepted, 5)
        served = transport.get_extra_info("socket")
        assert served.proto == socket.IPPROTO_TCP
        assert served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        writer.close()
        transport.close()
    finally:
        server.close()
        await server.wait_closed()

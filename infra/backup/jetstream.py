"""A JetStream stream's snapshot and restore, through the server's own API: every message
with its stream sequence, the stream's configuration and, unless told otherwise, its
consumers with their delivery and ack state.

nats-py has no call for these, so this speaks the API's subjects directly:
- `$JS.API.STREAM.SNAPSHOT.<stream>` with a `deliver_subject`: the server sends the snapshot
  (a tar, S2-compressed) there in chunks, each with a reply subject the client answers to ask
  for more (flow control), and ends with an empty message (status 204 where it has one).
- `$JS.API.STREAM.RESTORE.<stream>` with the stream's configuration and state: the server
  answers with a subject to send the chunks to, each as a request it acknowledges, and an
  empty message ends it; the answer to that is the restored stream's info, or an error.

The snapshot is taken by the server while publishing goes on. The state in its answer is the
stream's as it began; a message published while it is being written may be in it too, and
the restored stream's own state says what it holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

SNAPSHOT_API = "$JS.API.STREAM.SNAPSHOT.{stream}"
RESTORE_API = "$JS.API.STREAM.RESTORE.{stream}"
CHUNK_BYTES = 128 * 1024
API_TIMEOUT_S = 10.0
QUIET_LIMIT_S = 60.0
"""How long a snapshot may send nothing before it is given up as broken."""


class SnapshotError(RuntimeError):
    """The server refused or broke off a snapshot or a restore; the message says why."""


@dataclass(frozen=True)
class StreamSnapshot:
    """A stream's snapshot as written: its configuration and state at the snapshot's point,
    and the file with its size and SHA-256."""

    stream: str
    config: dict[str, Any]
    state: dict[str, Any]
    path: Path
    bytes: int
    sha256: str


def _answer(msg: Msg, what: str) -> dict[str, Any]:
    try:
        body = json.loads(msg.data or b"{}")
    except ValueError as exc:
        raise SnapshotError(f"{what}: the server answered something that is not JSON") from exc
    error = body.get("error")
    if error:
        raise SnapshotError(f"{what}: {error.get('description') or error} ({error.get('code')})")
    return dict(body)


async def snapshot_stream(
    nc: Client, stream: str, path: Path, *, consumers: bool = True
) -> StreamSnapshot:
    """Write `stream`'s snapshot to `path` (created, 0600); its configuration and state."""
    inbox = nc.new_inbox()
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    digest = hashlib.sha256()
    written = 0
    last_chunk = asyncio.get_running_loop().time()
    path.parent.mkdir(parents=True, exist_ok=True)
    out = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")

    async def chunk(msg: Msg) -> None:
        nonlocal written, last_chunk
        if finished.done():
            return
        status = (msg.headers or {}).get("Status")
        # the end is an empty message, with status 204 from servers that send one; any other
        # status on an empty message is an error
        if status and status != "204" and not msg.data:
            description = (msg.headers or {}).get("Description", "")
            broke = f"{stream}: the snapshot broke off: {status} {description}"
            finished.set_exception(SnapshotError(broke))
            return
        if not msg.data:
            finished.set_result(None)
            return
        out.write(msg.data)
        digest.update(msg.data)
        written += len(msg.data)
        last_chunk = asyncio.get_running_loop().time()
        if msg.reply:
            await nc.publish(msg.reply, b"")

    sub = await nc.subscribe(inbox, cb=chunk)
    try:
        request = {
            "deliver_subject": inbox,
            "chunk_size": CHUNK_BYTES,
            "no_consumers": not consumers,
        }
        answer = _answer(
            await nc.request(
                SNAPSHOT_API.format(stream=stream),
                json.dumps(request).encode(),
                timeout=API_TIMEOUT_S,
            ),
            f"{stream}: snapshot",
        )
        while not finished.done():
            try:
                await asyncio.wait_for(asyncio.shield(finished), 1.0)
            except TimeoutError:
                if asyncio.get_running_loop().time() - last_chunk > QUIET_LIMIT_S:
                    raise SnapshotError(
                        f"{stream}: the snapshot sent nothing for {QUIET_LIMIT_S:g} s"
                    ) from None
        finished.result()
    finally:
        await sub.unsubscribe()
        out.close()
    return StreamSnapshot(
        stream, answer["config"], answer["state"], path, written, digest.hexdigest()
    )


async def restore_stream(
    nc: Client, config: dict[str, Any], state: dict[str, Any], path: Path
) -> dict[str, Any]:
    """Create the stream `config` names from the snapshot at `path`, with its messages at
    their sequences and its consumers; the restored stream's info. A stream of that name must
    not exist (the server refuses)."""
    stream = str(config["name"])
    answer = _answer(
        await nc.request(
            RESTORE_API.format(stream=stream),
            json.dumps({"config": config, "state": state}).encode(),
            timeout=API_TIMEOUT_S,
        ),
        f"{stream}: restore",
    )
    deliver = str(answer["deliver_subject"])
    with path.open("rb") as chunks:
        while data := chunks.read(CHUNK_BYTES):
            reply = await nc.request(deliver, data, timeout=API_TIMEOUT_S)
            if reply.data:  # an error ends a restore early
                _answer(reply, f"{stream}: restore")
    done = await nc.request(deliver, b"", timeout=QUIET_LIMIT_S)
    return _answer(done, f"{stream}: restore")


async def stream_names(nc: Client) -> list[str]:
    """Every stream of the connection's account (`$JS.API.STREAM.NAMES`, paged)."""
    names: list[str] = []
    while True:
        answer = _answer(
            await nc.request(
                "$JS.API.STREAM.NAMES",
                json.dumps({"offset": len(names)}).encode(),
                timeout=API_TIMEOUT_S,
            ),
            "stream names",
        )
        page = answer.get("streams") or []
        names += [str(n) for n in page]
        if not page or len(names) >= int(answer.get("total", 0)):
            return sorted(names)

"""Attacks on the bus by one tenant against another and against ragbus's own account, tried as
a careful attacker would, on any NATS in `tenants` mode (one server, or a cluster).

Every attack carries a marker of its own, in its payload and, where it can, in its subjects.
Two spies listen on `>`: one in the service account (where every ragbus role and stream
lives) and one in the victim's account. An attack leaks when its marker reaches either spy
anywhere but where the attacker may legitimately send (its own document intake), or when a
secret of the victim's reaches the attacker. `run` returns every attack with its verdict, so
a test can assert 0 leaks and count them (docs/operations.md has the table).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from infra.tenancy import jwt
from infra.tenancy.accounts import connect_with_creds


@dataclass
class Attack:
    kind: str
    what: str
    leaked: bool = False
    note: str = ""


@dataclass
class Spy:
    """Everything one account sees on `>`: subject, reply and payload."""

    seen: list[tuple[str, str, bytes]] = field(default_factory=list)

    async def take(self, msg: Msg) -> None:
        self.seen.append((msg.subject, msg.reply or "", bytes(msg.data)))

    def saw(self, marker: str, *, allowed_subjects: tuple[str, ...] = ()) -> list[str]:
        return [
            subject
            for subject, reply, data in self.seen
            if (marker in subject or marker in reply or marker.encode() in data)
            and not subject.startswith(allowed_subjects)
        ]


def _marker() -> str:
    return "atk" + uuid.uuid4().hex[:12]


async def _quiet(coro: Any) -> Any:
    """An attacker's call: an error, a timeout or a refusal is the expected outcome."""
    try:
        return await coro
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError, OSError) as exc:
        return exc


@dataclass
class Parties:
    servers: list[str]  # ragbus's own connection's; the others' too, unless given
    service_creds: str  # a path
    attacker: str  # tenant names
    victim: str
    attacker_creds: str  # creds texts
    victim_creds: str
    attacker_servers: list[str] | None = None  # on a cluster: a node of its own
    victim_servers: list[str] | None = None


async def run(p: Parties) -> list[Attack]:
    attacks: list[Attack] = []
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    service = await nats.connect(p.servers, user_credentials=p.service_creds)
    victim = await connect_with_creds(p.victim_servers or p.servers, p.victim_creds)
    attacker = await connect_with_creds(
        p.attacker_servers or p.servers, p.attacker_creds, error_cb=on_error
    )
    service_spy, victim_spy, attacker_spy = Spy(), Spy(), Spy()
    await service.subscribe(">", cb=service_spy.take)
    await victim.subscribe(">", cb=victim_spy.take)
    for nc in (service, victim):
        await nc.flush()
    own_intake = (f"rag.intake.{p.attacker}", "_R_.")

    async def settle() -> None:
        for nc in (service, victim, attacker):
            await _quiet(nc.flush(timeout=2))
        await asyncio.sleep(0.4)

    def judge(kind: str, what: str, marker: str, note: str = "") -> None:
        leaks = service_spy.saw(marker, allowed_subjects=own_intake) + victim_spy.saw(marker)
        attacks.append(Attack(kind, what, bool(leaks), note or ", ".join(leaks)))

    victim_events = f"rag.events.{p.victim}"
    try:
        # -- writing where it may not: every subject class, directly -------------------------
        published: list[tuple[str, str]] = []
        for subject in (
            f"{victim_events}.{{m}}",
            "rag.query.submitted",
            "rag.query.cancel",
            "rag.query.child",
            "rag.cmd.generate",
            "rag.cmd.tool",
            "rag.cmd.search.vector",
            "rag.res.fuse",
            "rag.ingest.docs.{m}",
            "rag.ingest.events.{m}",
            "rag.dlq.{m}",
            f"rag.intake.{p.victim}",
            f"rag.intake.{p.attacker}",
            "rag.documents.{m}",
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.RAG_CMD.{m}",
            "$JS.ACK.RAG_CMD.generate.1.1.1.1.0",
            "$JS.FC.RAG_EVENTS.{m}",
            "$KV.{m}.key",
            "$O.{m}.C.x",
            "rag.ctl.backup.stores",
            # a forged announcement would steer the store owner's searches to a replica
            "rag.ctl.search.replicas",
            "rag.ctl.search.replica.r0",
        ):
            m = _marker()
            await attacker.publish(subject.format(m=m), json.dumps({"marker": m}).encode())
            published.append((subject.format(m="<marker>"), m))
        # one settle for the lot: each marker is its own, and a leak is one that arrived
        await settle()
        for what, m in published:
            judge("publish", what, m)

        # -- the same through reply subjects: a request whose answer another account would
        # publish (the document intake's, and JetStream API answers in its own account) ------
        replied: list[tuple[str, str]] = []
        for reply in (
            f"{victim_events}.{{m}}",
            "rag.query.submitted",
            "rag.cmd.generate",
            "rag.res.search.vector",
            "rag.ingest.docs.{m}",
            "rag.dlq.{m}",
            "_INBOX.{m}",
        ):
            for request in ("rag.documents", "$JS.API.INFO", "$JS.API.STREAM.NAMES"):
                m = _marker()
                # the marker is in the reply subject alone: the intake refuses the empty batch,
                # and its answer must reach the attacker's account only
                await attacker.publish(request, b"{}", reply=reply.format(m=m))
                replied.append((f"{request} answered to {reply.format(m='<marker>')}", m))
        await settle()
        for what, m in replied:
            judge("reply subject", what, m)

        # -- reaching another account's API: JetStream, the system account, KV, objects -----
        calls = [
            (api, body, _marker())
            for api, body in (
                ("$JS.API.STREAM.INFO.RAG_CMD", b""),
                ("$JS.API.STREAM.DELETE.RAG_EVENTS", b""),
                ("$JS.API.STREAM.PURGE.RAG_EVENTS", b""),
                ("$JS.API.STREAM.MSG.DELETE.RAG_EVENTS", b'{"seq": 1}'),
                ("$JS.API.STREAM.UPDATE.RAG_EVENTS", b'{"name": "RAG_EVENTS", "subjects": [">"]}'),
                ("$JS.API.CONSUMER.CREATE.RAG_EVENTS", b'{"stream_name": "RAG_EVENTS"}'),
                # the store owner's control request: a copy of every store, where it is told
                ("rag.ctl.backup.stores", b'{"directory": "/tmp/{m}"}'),
                # the stores' version, and a search command handed to a replica
                ("rag.ctl.stores.version", b""),
                ("rag.ctl.search.replica.r0", b'{"version": "{m}"}'),
                ("$SYS.REQ.CLAIMS.LIST", b""),
                ("$SYS.REQ.SERVER.PING", b""),
                ("$SYS.REQ.ACCOUNT.PING.CONNZ", b""),
            )
        ]
        # all at once: each waits its second for an answer that should not come
        answers = await asyncio.gather(
            *(
                _quiet(
                    attacker.request(api, body.replace(b"{m}", m.encode()) or m.encode(), timeout=1)
                )
                for api, body, m in calls
            )
        )
        await settle()
        for (api, _, m), answer in zip(calls, answers, strict=True):
            note = ""
            if isinstance(answer, Msg):
                note = answer.data[:80].decode(errors="replace")
            judge("API", api, m, note)

        # an account JWT of the attacker's own making, granting itself the victim's events,
        # pushed to the resolver
        m = _marker()
        fake_account = jwt.new_key("account")
        forged = jwt.encode(
            jwt.account_claims(
                jwt.public(fake_account),
                m,
                imports=[
                    jwt.import_(
                        "steal", f"{victim_events}.>", jwt.public(fake_account), "stream", ""
                    )
                ],
            ),
            fake_account,
        )
        for subject in (
            "$SYS.REQ.CLAIMS.UPDATE",
            f"$SYS.REQ.ACCOUNT.{jwt.public(fake_account)}.CLAIMS.UPDATE",
        ):
            answer = await _quiet(attacker.request(subject, forged.encode(), timeout=1))
            await settle()
            judge("API", f"{subject} with a self-signed account", m, repr(answer)[:80])

        # -- reading what it may not: wildcards, the victim's events and inboxes -------------
        attacker_subs = [
            await _quiet(attacker.subscribe(s, cb=attacker_spy.take))
            for s in (
                ">",
                "rag.>",
                "rag.events.>",
                f"{victim_events}.>",
                "_INBOX.>",
                "$JS.>",
                "$SYS.>",
                "$KV.>",
                "$O.>",
                "_R_.>",
            )
        ]
        await settle()
        secret = _marker()
        service_js = service.jetstream()
        await service_js.publish(f"{victim_events}.{secret}", json.dumps({"s": secret}).encode())
        await service.publish(f"rag.cmd.{secret}", secret.encode())
        await victim.publish(f"_INBOX.{secret}", secret.encode())
        await victim.publish(f"{victim_events}.{secret}", secret.encode())
        await settle()
        # the spies are not blind: the victim sees its own event, and ragbus its intake
        assert victim_spy.saw(secret), "the victim's spy missed its own event"
        intake = f"rag.intake.{p.attacker}"
        assert any(s == intake for s, _, _ in service_spy.seen), "the service spy saw no intake"
        stolen = attacker_spy.saw(secret)
        attacks.append(
            Attack(
                "read",
                f"subscriptions on {len(attacker_subs)} wildcards while the victim's events, "
                "inbox and a work subject carry a secret",
                bool(stolen),
                ", ".join(stolen),
            )
        )

        # JetStream reads: the attacker's stream holds its own events only
        attacker_js = attacker.jetstream(timeout=2)
        names = await _quiet(attacker_js.streams_info())
        mine_only = not isinstance(names, Exception) and all(
            s.config.subjects == [f"rag.events.{p.attacker}.>"] for s in names
        )
        attacks.append(Attack("read", "stream list and subjects", not mine_only, repr(names)[:120]))
        got = await _quiet(attacker_js.get_last_msg("RAG_EVENTS", f"{victim_events}.{secret}"))
        attacks.append(
            Attack(
                "read",
                "the victim's event by subject from the stream of its own name",
                secret.encode() in (getattr(got, "data", None) or b""),
                repr(got)[:80],
            )
        )

        # -- names shared between tenants: a consumer named after the victim's ---------------
        victim_js = victim.jetstream(timeout=2)
        await victim_js.add_consumer(
            "RAG_EVENTS",
            ConsumerConfig(durable_name="follow", filter_subject=f"{victim_events}.>"),
        )
        squat = await _quiet(
            attacker_js.add_consumer(
                "RAG_EVENTS",
                ConsumerConfig(
                    durable_name="follow",
                    deliver_subject="steal.deliver",
                    deliver_policy=DeliverPolicy.ALL,
                ),
            )
        )
        kept = await victim_js.consumer_info("RAG_EVENTS", "follow")
        attacks.append(
            Attack(
                "names",
                "a durable consumer named as the victim's",
                kept.config.deliver_subject is not None
                or kept.config.filter_subject != f"{victim_events}.>",
                repr(squat)[:80],
            )
        )

        # -- a flood of consumers: the attacker's account stops it, the others do not notice --
        before = (await service_js.account_info()).consumers
        made, refused_at = 0, None
        for n in range(200):
            answer = await _quiet(
                attacker_js.add_consumer("RAG_EVENTS", ConsumerConfig(durable_name=f"f{n}"))
            )
            if isinstance(answer, Exception):
                refused_at = n
                break
            made += 1
        after = (await service_js.account_info()).consumers
        attacks.append(
            Attack(
                "flood",
                "durable consumers without end",
                refused_at is None or after != before,
                f"{made} made, refused at {refused_at}; service account {before} -> {after}",
            )
        )
        for n in range(made):
            await _quiet(attacker_js.delete_consumer("RAG_EVENTS", f"f{n}"))

        # -- last, as it may cost the attacker its own copy: deletes, directly and as a JetStream
        # API answer the server publishes to a reply subject; the victim's and ragbus's stay --
        await _quiet(attacker_js.delete_stream("RAG_EVENTS"))
        await attacker.publish("$JS.API.INFO", b"", reply="$JS.API.STREAM.DELETE.RAG_EVENTS")
        await settle()
        victim_stream = await _quiet(victim_js.stream_info("RAG_EVENTS"))
        service_stream = await _quiet(service_js.stream_info("RAG_EVENTS"))
        attacks.append(
            Attack(
                "API",
                "deleting RAG_EVENTS, directly and as a reply subject",
                isinstance(victim_stream, Exception) or isinstance(service_stream, Exception),
                f"victim's: {type(victim_stream).__name__}, ragbus's: "
                f"{type(service_stream).__name__}",
            )
        )

        # -- a user of the victim's account, signed by the attacker -------------------------
        attacker_user = jwt.new_key("user")
        victim_account = jwt.decode(p.victim_creds.split("\n")[1], verify=False)["nats"][
            "issuer_account"
        ]
        forged_user = jwt.encode(
            jwt.user_claims(jwt.public(attacker_user), "forged", issuer_account=victim_account),
            attacker_user,
        )
        impostor = await _quiet(
            connect_with_creds(
                p.servers,
                jwt.creds(forged_user, attacker_user),
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=2,
            )
        )
        attacks.append(
            Attack(
                "identity",
                "a user JWT for the victim's account signed by the attacker",
                isinstance(impostor, NATS),
                repr(impostor)[:80],
            )
        )
        if isinstance(impostor, NATS):
            await impostor.close()
    finally:
        for nc in (attacker, victim, service):
            await _quiet(nc.close())
    return attacks


async def assert_no_leak(parties: Parties) -> dict[str, Any]:
    """Run every attack and fail on any leak; the summary, printed (`pytest -s` shows it)."""
    report = summary(await run(parties))
    print(json.dumps(report, indent=1))
    assert report["tried"] >= MIN_ATTACKS
    assert report["leaked"] == 0, report["leaks"]
    return report


MIN_ATTACKS = 50
"""Fewer would mean that attacks went missing from the suite."""


def summary(attacks: list[Attack]) -> dict[str, Any]:
    kinds: dict[str, dict[str, int]] = {}
    for attack in attacks:
        row = kinds.setdefault(attack.kind, {"tried": 0, "leaked": 0})
        row["tried"] += 1
        row["leaked"] += attack.leaked
    return {
        "tried": len(attacks),
        "leaked": sum(a.leaked for a in attacks),
        "by_kind": kinds,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "leaks": [a.__dict__ for a in attacks if a.leaked],
    }

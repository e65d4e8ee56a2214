"""Random document metadata and random filters over it: what the filter benchmark
(`ragbus bench-filters`) and the stores' filter contract tests draw, from one seed.

The metadata has every kind the language compares (strings, integers, floats, booleans, dates
with and without a time, lists, a nested object, fields some documents lack), and the filters
use every operator and combination, at depths up to three, with operands that both hit and
miss, so that an answer that ignores a filter, or applies one wrongly, is caught by
`contracts.filters.matches`.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

KINDS = ("report", "memo", "paper", "slides", "email", "minutes")
TEAMS = ("legal", "finance", "research", "sales", "ops")
TAGS = ("product-x", "product-y", "q1", "q2", "q3", "q4", "draft", "final", "eu", "us")
START = datetime(2015, 1, 1, tzinfo=UTC)


def random_date(rng: random.Random) -> datetime:
    return START + timedelta(seconds=rng.randrange(0, 10 * 365 * 86400))


def date_text(rng: random.Random, moment: datetime) -> str:
    """A date as files and callers write them: a bare day, or a time in UTC or an offset."""
    style = rng.randrange(3)
    if style == 0:
        return moment.strftime("%Y-%m-%d")
    if style == 1:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    offset = timezone(timedelta(hours=rng.choice([-5, 2, 9])))
    return moment.astimezone(offset).isoformat(timespec="seconds")


def random_metadata(rng: random.Random) -> dict[str, Any]:
    """One document's metadata; each field is missing from some documents."""
    meta: dict[str, Any] = {}
    if rng.random() < 0.95:
        meta["kind"] = rng.choice(KINDS)
    if rng.random() < 0.9:
        meta["year"] = rng.randrange(2015, 2025)
    if rng.random() < 0.8:
        meta["score"] = round(rng.uniform(0, 10), 2)
    if rng.random() < 0.8:
        meta["tags"] = rng.sample(TAGS, rng.randrange(0, 4))
    if rng.random() < 0.7:
        meta["public"] = rng.random() < 0.5
    if rng.random() < 0.85:
        meta["published"] = date_text(rng, random_date(rng))
    if rng.random() < 0.8:
        meta["file"] = {"team": rng.choice(TEAMS), "pages": rng.randrange(1, 60)}
    return meta


def _condition(rng: random.Random) -> dict[str, Any]:
    field = rng.choice(["kind", "year", "score", "tags", "public", "published", "team", "pages"])
    if field == "kind":
        return rng.choice(
            [
                {"kind": rng.choice(KINDS)},
                {"kind": {"$ne": rng.choice(KINDS)}},
                {"kind": {"$in": rng.sample(KINDS, rng.randrange(1, 4))}},
                {"kind": {"$nin": rng.sample(KINDS, rng.randrange(1, 3))}},
                {"kind": {"$exists": rng.random() < 0.5}},
            ]
        )
    if field in ("year", "pages"):
        path = "year" if field == "year" else "file.pages"
        low: int | float = rng.randrange(2015, 2025) if field == "year" else rng.randrange(1, 60)
        op = rng.choice(["$gt", "$gte", "$lt", "$lte", "$eq", "$ne", "$in"])
        operand: Any = [low, low + 1, low + 3] if op == "$in" else low
        if op == "$eq" and rng.random() < 0.5:
            operand = float(low)  # 2020.0 equals 2020
        return {path: {op: operand}}
    if field == "score":
        low = round(rng.uniform(0, 10), 1)
        if rng.random() < 0.5:
            return {"score": {"$gte": low, "$lt": round(low + rng.uniform(0.5, 5), 1)}}
        return {"score": {rng.choice(["$gt", "$lte"]): low}}
    if field == "tags":
        return rng.choice(
            [
                {"tags": rng.choice(TAGS)},
                {"tags": {"$in": rng.sample(TAGS, 2)}},
                {"tags": {"$nin": rng.sample(TAGS, 2)}},
                {"tags": {"$exists": True}},
            ]
        )
    if field == "public":
        return rng.choice([{"public": True}, {"public": False}, {"public": {"$ne": True}}])
    if field == "team":
        return rng.choice(
            [
                {"file.team": rng.choice(TEAMS)},
                {"file.team": {"$in": rng.sample(TEAMS, 2)}},
                {"file.team": {"$exists": False}},
            ]
        )
    moment = random_date(rng)
    bound = moment.strftime("%Y-%m-%d") if rng.random() < 0.5 else moment.isoformat()
    return {"published": {rng.choice(["$gt", "$gte", "$lt", "$lte"]): bound}}


def random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A filter of conditions, `$and`, `$or` and `$not`, at most three levels deep."""
    roll = rng.random()
    if depth >= 2 or roll < 0.45:
        return _condition(rng)
    if roll < 0.65:
        first, second = _condition(rng), _condition(rng)
        if not set(first) & set(second):
            return {**first, **second}  # the implicit $and of one object's keys
        return {"$and": [first, second]}
    if roll < 0.8:
        return {"$and": [random_filter(rng, depth + 1) for _ in range(rng.randrange(2, 4))]}
    if roll < 0.93:
        return {"$or": [random_filter(rng, depth + 1) for _ in range(rng.randrange(2, 4))]}
    return {"$not": random_filter(rng, depth + 1)}

"""The Neo4j backend: the same model and ranking, in Cypher over the official async driver.

The schema and the longer statements are in `infra.retrieval.graph.neo4j_cypher`."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from contracts.models import RetrievedChunk
from infra.logging import get_logger
from infra.retrieval.chunking import Chunk, placed
from infra.retrieval.entities import Entity, title_norms
from infra.retrieval.graph.communities import brief_chunk_ids, detect_communities, summarise_all
from infra.retrieval.graph.model import (
    BRIEF_ENTITIES,
    MENTIONS_CAP,
    MIN_PREFIX,
    SUMMARY_ENTITIES,
    Community,
    Embed,
    Hit,
    Summarise,
    entity_key,
    generic_df,
)
from infra.retrieval.graph.neo4j_cypher import (
    DELETE_CHUNKS,
    DOC_ENTITY_KEYS,
    DROP_EMPTY_RELATES,
    DROP_ORPHANS,
    MARK_DIRTY,
    MATCH_ENTITIES,
    REFRESH_RELATES,
    SCHEMA,
    TITLE_MENTIONS,
    WRITE_DOCUMENT,
    WRITE_MENTIONS,
    WRITE_RELATES,
)
from infra.retrieval.graph.ranking import match_weight, rank_global, rank_local
from infra.retrieval.scope import Scope

log = get_logger(__name__)

CHUNK_FIELDS = ("chunk_id", "document_id", "title", "source", "namespace", "text")
PLACE = "c.heading AS heading, c.page AS page, c.page_label AS page_label"
"""A chunk's place in its document, as `placed` reads it (null on a chunk written before
pages existed, or from a text document)."""


def _chunk(row: dict[str, Any]) -> RetrievedChunk:
    return RetrievedChunk(**{k: row.get(k) or "" for k in CHUNK_FIELDS}, **placed(row))


class Neo4jGraphStore:
    """The same graph in Neo4j: MERGE-based writes in one transaction per document."""

    def __init__(self, driver: Any, database: str | None = None) -> None:
        self._driver = driver
        self._database = database
        self._embed: Embed | None = None
        self._summarise: Summarise | None = None

    async def _run(self, query: str, **params: Any) -> list[dict[str, Any]]:
        result = await self._driver.execute_query(query, params, database_=self._database)
        return [record.data() for record in result.records]

    async def start(self) -> None:
        await self._driver.verify_connectivity()
        for statement in SCHEMA:
            await self._run(statement)

    # ---------------------------------------------------------------- writes

    @staticmethod
    async def _delete_tx(tx: Any, namespace: str, document_id: str) -> None:
        params = {"ns": namespace, "doc": document_id, "dkey": f"{namespace}/{document_id}"}
        record = await (await tx.run(DOC_ENTITY_KEYS, params)).single()
        keys = list(record["keys"]) if record else []
        await (await tx.run(DELETE_CHUNKS, params)).consume()
        if keys:
            await (await tx.run(REFRESH_RELATES, {"keys": keys})).consume()
            await (await tx.run(DROP_EMPTY_RELATES, {"keys": keys})).consume()
            await (await tx.run(DROP_ORPHANS, {"keys": keys})).consume()

    async def upsert_document(
        self,
        namespace: str,
        document_id: str,
        title: str,
        chunks: Sequence[Chunk],
        chunk_entities: Sequence[Sequence[Entity]],
    ) -> None:
        if len(chunks) != len(chunk_entities):
            raise ValueError("one entity list per chunk is required")
        params = {
            "ns": namespace,
            "doc": document_id,
            "dkey": f"{namespace}/{document_id}",
            "title": title,
            "title_norms": title_norms(title),
            "chunks": [
                {
                    "chunk_id": c.chunk_id,
                    "text": c.text,
                    "source": c.source,
                    "index": c.index,
                    "heading": c.heading or None,  # null: the property is not kept
                    "page": c.page,
                    "page_label": c.page_label or None,
                    "mention_norms": [e.norm for e in entities],
                    "mention_kinds": [e.kind for e in entities],
                }
                for c, entities in zip(chunks, chunk_entities, strict=True)
            ],
        }
        mentions: list[dict[str, Any]] = [
            {
                "chunk_id": chunk.chunk_id,
                "key": entity_key(namespace, e.norm),
                "norm": e.norm,
                "name": e.name,
                "kind": e.kind,
                "tokens": e.norm.split() if " " in e.norm else [],
            }
            for chunk, entities in zip(chunks, chunk_entities, strict=True)
            for e in entities
        ]
        keys = sorted({m["key"] for m in mentions})

        async def work(tx: Any) -> None:
            await self._delete_tx(tx, namespace, document_id)
            await (await tx.run(WRITE_DOCUMENT, params)).consume()
            await (await tx.run(WRITE_MENTIONS, {"ns": namespace, "mentions": mentions})).consume()
            relates = {"keys": keys, "ns": namespace, "doc": document_id}
            await (await tx.run(WRITE_RELATES, relates)).consume()
            await (await tx.run(MARK_DIRTY)).consume()

        async with self._driver.session(database=self._database) as session:
            await session.execute_write(work)

    async def delete_document(self, namespace: str, document_id: str) -> None:
        async def work(tx: Any) -> None:
            await self._delete_tx(tx, namespace, document_id)
            await (await tx.run(MARK_DIRTY)).consume()

        async with self._driver.session(database=self._database) as session:
            await session.execute_write(work)

    # ---------------------------------------------------------------- GraphView

    async def match(
        self, namespaces: Sequence[str], norms: Sequence[str], per_norm: int | None = None
    ) -> list[Hit]:
        """Every hit, `per_norm` or not (`rank_local` keeps the strongest itself)."""
        rows = await self._run(
            MATCH_ENTITIES,
            norms=list(dict.fromkeys(norms)),
            namespaces=list(namespaces),
            min_prefix=MIN_PREFIX,
        )
        hits = []
        for row in rows:
            weight = match_weight(row["q"], row["norm"])
            if weight:
                hits.append(
                    Hit(row["q"], row["key"], row["namespace"], weight, row["df"], row["community"])
                )
        return hits

    async def match_communities(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[Hit]:
        """Every hit (`rank_global` keeps each community's strongest itself)."""
        return await self.match(namespaces, norms)

    async def chunk_totals(self, namespaces: Sequence[str]) -> dict[str, int]:
        rows = await self._run(
            "MATCH (c:Chunk) WHERE c.namespace IN $namespaces "
            "RETURN c.namespace AS ns, count(c) AS n",
            namespaces=list(namespaces),
        )
        return {row["ns"]: row["n"] for row in rows}

    async def mentions(self, keys: Sequence[str]) -> dict[str, list[str]]:
        rows = await self._run(
            "UNWIND $keys AS k MATCH (e:Entity {key: k})-[:MENTIONED_IN]->(c:Chunk) "
            "WITH k, c.chunk_id AS id ORDER BY id "
            "RETURN k, collect(id)[..$cap] AS chunks",
            keys=list(keys),
            cap=MENTIONS_CAP,
        )
        return {row["k"]: list(row["chunks"]) for row in rows}

    async def neighbours(
        self, keys: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, int, int]]]:
        rows = await self._run(
            "UNWIND $keys AS k MATCH (e:Entity {key: k})-[r:RELATES_TO]-(n:Entity) "
            "WITH k, n, r.weight AS w ORDER BY w DESC, n.key "
            "WITH k, collect([n.key, w, size([(n)-[:MENTIONED_IN]->() | 1])])[..$limit] AS ns "
            "RETURN k, ns",
            keys=list(keys),
            limit=limit,
        )
        return {row["k"]: [(n[0], int(n[1]), int(n[2])) for n in row["ns"]] for row in rows}

    async def fetch_chunks(self, chunk_ids: Sequence[str]) -> dict[str, RetrievedChunk]:
        rows = await self._run(
            "UNWIND $ids AS id MATCH (c:Chunk {chunk_id: id}) "
            "RETURN c.chunk_id AS chunk_id, c.document_id AS document_id, c.title AS title, "
            f"c.source AS source, c.namespace AS namespace, c.text AS text, {PLACE}",
            ids=list(chunk_ids),
        )
        return {row["chunk_id"]: _chunk(row) for row in rows}

    async def within(self, namespaces: Sequence[str], scope: Scope) -> bool:
        return False  # asking would cost a query a command: the scoped view's way instead

    async def chunks_of(self, documents: Iterable[tuple[str, str]]) -> set[str]:
        rows = await self._run(
            "UNWIND $docs AS d MATCH (c:Chunk {namespace: d[0], document_id: d[1]}) "
            "RETURN c.chunk_id AS chunk_id",
            docs=[list(doc) for doc in documents],
        )
        return {row["chunk_id"] for row in rows}

    async def documents_about(
        self, namespaces: Sequence[str], norms: Sequence[str]
    ) -> list[RetrievedChunk]:
        rows = await self._run(
            "UNWIND range(0, size($norms) - 1) AS position "
            "MATCH (d:Document)-[:HAS_CHUNK]->(c:Chunk) "
            "WHERE d.namespace IN $namespaces AND $norms[position] IN d.title_norms "
            "WITH position, d, c ORDER BY position, c.index "
            "WITH d, min(position) AS position, collect(c)[0] AS c "
            "RETURN c.chunk_id AS chunk_id, c.document_id AS document_id, c.title AS title, "
            f"c.source AS source, c.namespace AS namespace, c.text AS text, {PLACE} "
            "ORDER BY position, d.key",
            namespaces=list(namespaces),
            norms=list(norms),
        )
        return [_chunk(row) for row in rows]

    async def particular_titles(self, namespaces: Sequence[str], norms: Sequence[str]) -> list[str]:
        rows = await self._run(
            TITLE_MENTIONS, norms=list(dict.fromkeys(norms)), namespaces=list(namespaces)
        )
        totals = await self.chunk_totals(namespaces) if rows else {}
        particular = {row["q"] for row in rows if row["df"] <= generic_df(totals.get(row["ns"], 0))}
        return [norm for norm in dict.fromkeys(norms) if norm in particular]

    async def chunk_entities(self, chunk_ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        rows = await self._run(
            "UNWIND $ids AS id MATCH (c:Chunk {chunk_id: id}) "
            "RETURN c.chunk_id AS chunk_id, coalesce(c.mention_norms, []) AS norms, "
            "coalesce(c.mention_kinds, []) AS kinds",
            ids=list(chunk_ids),
        )
        return {
            row["chunk_id"]: list(zip(row["norms"], row["kinds"], strict=False)) for row in rows
        }

    async def communities(self, namespaces: Sequence[str]) -> list[Community]:
        rows = await self._run(
            "MATCH (m:Community) WHERE m.namespace IN $namespaces "
            "RETURN m.key AS key, m.namespace AS namespace, m.members AS members, "
            "m.chunk_ids AS chunk_ids, m.summary AS summary, m.vector AS vector",
            namespaces=list(namespaces),
        )
        return [Community(**row) for row in rows]

    # ---------------------------------------------------------------- GraphStore

    async def local_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        top_k: int,
        scope: Scope | None = None,
    ) -> list[RetrievedChunk]:
        return await rank_local(self, namespaces, query_norms, top_k, scope)

    async def _dirty(self) -> bool:
        rows = await self._run("MATCH (m:RagbusMeta {key: 'communities'}) RETURN m.dirty AS dirty")
        return bool(rows and rows[0]["dirty"])

    async def global_search(
        self,
        namespaces: Sequence[str],
        query_norms: Sequence[str],
        query_vector: Sequence[float] | None,
        top_k: int,
        scope: Scope | None = None,
    ) -> list[RetrievedChunk]:
        if await self._dirty():
            await self.recompute_communities()
        return await rank_global(self, namespaces, query_norms, query_vector, top_k, scope)

    async def recompute_communities(
        self, embed: Embed | None = None, summarise: Summarise | None = None
    ) -> int:
        if embed is not None:
            self._embed = embed
        if summarise is not None:
            self._summarise = summarise
        rows = await self._run(
            "MATCH (e:Entity)-[:MENTIONED_IN]->(c:Chunk) "
            "RETURN c.namespace AS ns, c.chunk_id AS chunk_id, collect(e.key) AS keys"
        )
        per_namespace: dict[str, dict[str, list[str]]] = defaultdict(dict)
        for row in rows:
            per_namespace[row["ns"]][row["chunk_id"]] = list(row["keys"])
        found: list[Community] = []
        for namespace, chunk_entities in per_namespace.items():
            found.extend(await asyncio.to_thread(detect_communities, namespace, chunk_entities))
        shown = BRIEF_ENTITIES if self._summarise else SUMMARY_ENTITIES
        member_keys = sorted({k for c in found for k in c.members[:shown]})
        names = {
            row["key"]: row["name"]
            for row in await self._run(
                "UNWIND $keys AS k MATCH (e:Entity {key: k}) RETURN e.key AS key, e.name AS name",
                keys=member_keys,
            )
        }
        if self._summarise is not None:
            wanted = brief_chunk_ids(found)
        else:
            wanted = [c.chunk_ids[0] for c in found if c.chunk_ids]
        texts = {cid: chunk.text for cid, chunk in (await self.fetch_chunks(wanted)).items()}
        await summarise_all(found, names, texts, self._embed, self._summarise)
        payload = [asdict(c) for c in found]
        membership = [{"key": k, "community": c.key} for c in found for k in c.members]

        async def work(tx: Any) -> None:
            await (await tx.run("MATCH (m:Community) DETACH DELETE m")).consume()
            await (await tx.run("MATCH (e:Entity) REMOVE e.community")).consume()
            await (
                await tx.run(
                    "UNWIND $rows AS row CREATE (m:Community) SET m = row", {"rows": payload}
                )
            ).consume()
            await (
                await tx.run(
                    "UNWIND $rows AS row MATCH (e:Entity {key: row.key}) "
                    "SET e.community = row.community",
                    {"rows": membership},
                )
            ).consume()
            await (
                await tx.run("MERGE (m:RagbusMeta {key: 'communities'}) SET m.dirty = false")
            ).consume()

        async with self._driver.session(database=self._database) as session:
            await session.execute_write(work)
        log.info("communities_recomputed", communities=len(found), backend="neo4j")
        return len(found)

    async def stats(self) -> dict[str, Any]:
        counts: dict[str, Any] = {"backend": "neo4j"}
        for label, key in (
            ("Document", "documents"),
            ("Chunk", "chunks"),
            ("Entity", "entities"),
            ("Community", "communities"),
        ):
            rows = await self._run(f"MATCH (n:{label}) RETURN count(n) AS n")
            counts[key] = rows[0]["n"] if rows else 0
        rows = await self._run("MATCH ()-[r:MENTIONED_IN]->() RETURN count(r) AS n")
        counts["mentions"] = rows[0]["n"] if rows else 0
        counts["communities_dirty"] = await self._dirty()
        return counts

    async def ping(self) -> bool:
        try:
            await self._driver.verify_connectivity()
        except Exception as exc:
            log.warning("neo4j_unreachable", error=str(exc))
            return False
        return True

    async def aclose(self) -> None:
        await self._driver.close()

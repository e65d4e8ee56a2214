"""The Neo4j backend's schema and its longer Cypher statements: a document's write and delete,
the communities' dirty mark and the entity match. Shorter reads stay inline where they run
(`infra.retrieval.graph.neo4j_store`)."""

SCHEMA = (
    "CREATE CONSTRAINT ragbus_chunk_id IF NOT EXISTS FOR (c:Chunk) REQUIRE c.chunk_id IS UNIQUE",
    "CREATE CONSTRAINT ragbus_entity_key IF NOT EXISTS FOR (e:Entity) REQUIRE e.key IS UNIQUE",
    "CREATE CONSTRAINT ragbus_document_key IF NOT EXISTS FOR (d:Document) REQUIRE d.key IS UNIQUE",
    "CREATE CONSTRAINT ragbus_community_key IF NOT EXISTS "
    "FOR (m:Community) REQUIRE m.key IS UNIQUE",
    "CREATE INDEX ragbus_entity_ns_norm IF NOT EXISTS FOR (e:Entity) ON (e.namespace, e.norm)",
    "CREATE INDEX ragbus_chunk_doc IF NOT EXISTS FOR (c:Chunk) ON (c.namespace, c.document_id)",
    "CREATE INDEX ragbus_community_ns IF NOT EXISTS FOR (m:Community) ON (m.namespace)",
)

DOC_ENTITY_KEYS = """
MATCH (c:Chunk {namespace: $ns, document_id: $doc})<-[:MENTIONED_IN]-(e:Entity)
RETURN collect(DISTINCT e.key) AS keys
"""
DELETE_CHUNKS = """
OPTIONAL MATCH (c:Chunk {namespace: $ns, document_id: $doc}) DETACH DELETE c
WITH count(*) AS _
OPTIONAL MATCH (d:Document {key: $dkey}) DETACH DELETE d
"""
REFRESH_RELATES = """
UNWIND $keys AS k
MATCH (a:Entity {key: k})-[r:RELATES_TO]-(b:Entity)
WHERE b.key IN $keys AND a.key < b.key
OPTIONAL MATCH (a)-[:MENTIONED_IN]->(c:Chunk)<-[:MENTIONED_IN]-(b)
WITH r, count(DISTINCT c) AS w
SET r.weight = w
"""
DROP_EMPTY_RELATES = """
UNWIND $keys AS k
MATCH (:Entity {key: k})-[r:RELATES_TO]->(:Entity)
WHERE r.weight = 0
DELETE r
"""
DROP_ORPHANS = """
UNWIND $keys AS k
MATCH (e:Entity {key: k})
WHERE NOT (e)-[:MENTIONED_IN]->()
DETACH DELETE e
"""
WRITE_DOCUMENT = """
MERGE (d:Document {key: $dkey})
SET d.namespace = $ns, d.document_id = $doc, d.title = $title, d.title_norms = $title_norms
WITH d
UNWIND $chunks AS ch
MERGE (c:Chunk {chunk_id: ch.chunk_id})
SET c.namespace = $ns, c.document_id = $doc, c.title = $title, c.text = ch.text,
    c.source = ch.source, c.index = ch.index, c.mention_norms = ch.mention_norms,
    c.mention_kinds = ch.mention_kinds, c.heading = ch.heading, c.page = ch.page,
    c.page_label = ch.page_label
MERGE (d)-[:HAS_CHUNK]->(c)
"""
WRITE_MENTIONS = """
UNWIND $mentions AS m
MATCH (c:Chunk {chunk_id: m.chunk_id})
MERGE (e:Entity {key: m.key})
ON CREATE SET e.namespace = $ns, e.norm = m.norm, e.name = m.name, e.kind = m.kind,
              e.tokens = m.tokens
MERGE (e)-[:MENTIONED_IN]->(c)
"""
WRITE_RELATES = """
UNWIND $keys AS k
MATCH (a:Entity {key: k})-[:MENTIONED_IN]->(:Chunk {namespace: $ns, document_id: $doc})
      <-[:MENTIONED_IN]-(b:Entity)
WHERE a.key < b.key
WITH DISTINCT a, b
MATCH (a)-[:MENTIONED_IN]->(c:Chunk)<-[:MENTIONED_IN]-(b)
WITH a, b, count(DISTINCT c) AS w
MERGE (a)-[r:RELATES_TO]->(b)
SET r.weight = w
"""
MARK_DIRTY = "MERGE (m:RagbusMeta {key: 'communities'}) SET m.dirty = true"
MATCH_ENTITIES = """
UNWIND $norms AS q
MATCH (e:Entity)
WHERE e.namespace IN $namespaces
  AND (e.norm = q OR q IN coalesce(e.tokens, [])
       OR (size(q) >= $min_prefix AND e.norm STARTS WITH q))
RETURN q, e.key AS key, e.namespace AS namespace, e.norm AS norm, e.community AS community,
       size([(e)-[:MENTIONED_IN]->() | 1]) AS df
"""

TITLE_MENTIONS = """
UNWIND $norms AS q
MATCH (d:Document)
WHERE d.namespace IN $namespaces AND q IN d.title_norms
WITH DISTINCT q, d.namespace AS ns
OPTIONAL MATCH (e:Entity {key: ns + '|' + q})
RETURN q, ns,
       CASE WHEN e IS NULL THEN 0 ELSE size([(e)-[:MENTIONED_IN]->() | 1]) END AS df
"""

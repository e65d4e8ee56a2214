"""Sources kept in sync: their registry (Redis), their state (JetStream KV), the kinds of
source a sync reads, and the sync itself (`sync.SourceSyncer`), which `workers.sources`
runs on the bus."""

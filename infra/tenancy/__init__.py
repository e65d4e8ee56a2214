"""Tenants: their records and keys (`registry`), their limits (`quotas`), and the NATS
users the project's own nats-server gives them (`nats_auth`)."""

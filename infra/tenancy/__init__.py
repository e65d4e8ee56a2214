"""Tenants: their records and keys (`registry`), their limits (`quotas`), and on NATS an
account each (`trust`: the operator's keys; `jwt`: the claims; `accounts`: a tenant's account,
pushed to the servers; `tenants`: making and revoking one)."""

"""The runtime every process shares: the bus (streams, consumers, publishing), the worker
policy (acks, retries, dead letters, phase events), process resources, local services and the
ingest job bookkeeping."""

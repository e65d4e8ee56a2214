"""Graph store internals; `infra.retrieval.graph.store` is the interface the rest of ragbus uses."""

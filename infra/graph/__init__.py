"""Graph store internals; `infra.graph_store` is the interface the rest of ragbus uses."""

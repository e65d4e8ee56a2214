"""What services share below the workers: settings, logging, metrics and errors at the top;
`infra.runtime` (bus, worker policy, resources, services) and `infra.retrieval` (encoders,
stores, text analysis) as packages; the LLM adapter (`infra.llm`, `infra.llm_tasks`)."""

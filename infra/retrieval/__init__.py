"""The retrieval engines: encoders, text analysis and entities, the vector store and the graph
store. Workers reach them through `infra.runtime.resources.Resources`."""

"""The fuse engine: the channels' rankings fused by the intent's weights (`rrf`), bridged
(`bridge`), a decomposed retry's follow-ups added (`follow_up`), reranked (`rerank`), hydrated
and claimed, as one call (`pipeline.fuse_rankings`). The fuse worker runs it, and the search
worker for the channels it searched itself."""

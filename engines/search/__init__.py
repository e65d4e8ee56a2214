"""The search engine: the four document channels (`channels`), one channel's search ranked and
held to its deadline (`channel_search`), and the text channels' lists completed and searched
again before fusion (`refine`: `completion`, `feedback`). The search worker runs it; the
`memory` channel is the memory engine's (`engines.memory`)."""

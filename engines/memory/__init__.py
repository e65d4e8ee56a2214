"""The memory engine: what a finished turn leaves in a conversation's memory, and the `memory`
channel's recall of it (`recall`). The memory worker runs it."""

"""The saga: decides what happens next for each request; never does a step's work itself."""

"""Programs written as agentic functions on top of the engine."""

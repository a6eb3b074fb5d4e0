"""Tools: backends, business-tool handlers, the registry, LLM providers and the `Services` object."""

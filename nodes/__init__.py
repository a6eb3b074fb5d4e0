"""One module per graph node. Each node is `(state, runtime) -> partial update`."""

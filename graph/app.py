"""The graph `langgraph.json` serves. The dev server brings its own persistence, so no checkpointer."""

from graph.builder import compile_graph

graph = compile_graph()

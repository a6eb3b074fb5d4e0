"""The base, core, lab and shell levels; graph, nodes, ingest and tools sit between them as top-level packages."""

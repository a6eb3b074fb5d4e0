"""The top level: CLI, HTTP server, demo, doctor, terminal rendering and web chat."""

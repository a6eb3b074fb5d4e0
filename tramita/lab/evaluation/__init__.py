"""Evaluation: the conversation and question suites of sample/novaops/README.md, with their rules."""

"""Dialogue logic the nodes call (intent, extraction, precedence, transactions, replies); no LangGraph."""

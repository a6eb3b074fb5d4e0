"""Business-tool handlers: the only code that writes to the business database."""

"""Small shared utilities: clock, backoff, structured logging."""

"""Pure builders of OCI runtime `config.json` documents for sandboxes and containers."""

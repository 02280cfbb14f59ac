"""The retrain control plane: Lambda handlers and the names they share with the CLI."""

"""Development tools used by the Makefile's gates."""

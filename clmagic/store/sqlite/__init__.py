"""The SQLite store: one file holds every entry (a bundle is one too)."""

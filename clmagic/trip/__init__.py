"""The build trip: a source through the caches to a program, for one device or many
(:mod:`.route`, told once), with what a trip leaves (records, history) and what it does in the
background (a MISS's save)."""

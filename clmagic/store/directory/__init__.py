"""The directory store, the default: one file per entry under a folder per device, no locks."""

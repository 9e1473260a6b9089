"""What decides "same program": the source checked and normalised, its options, every file the
compiler may read, and the keys made of them, all before any cache is asked."""

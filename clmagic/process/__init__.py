"""What one process shares: its compiler (:mod:`.session`), and the pyopencl hook that sends
every ``Program.build`` through it (:mod:`.hook`)."""

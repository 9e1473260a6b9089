"""Looking after a cache: its entries chosen, cleared and counted, shipped as bundles, filled by
warm and sweeps, Kernel Tuner's observer, and the launch checker (``%clcheck``): the work that
runs many build trips or reads what they stored, above any one trip."""

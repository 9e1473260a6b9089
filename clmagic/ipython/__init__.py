"""The IPython interface: thin magics (``%%clkernel``, ``%clcache``, ``%cltime``, ``%clcheck``)
over the library, which works without IPython."""

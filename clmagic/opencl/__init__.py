"""The driver: devices, the few pyopencl calls clmagic makes, what the compiler says of each
kernel, and the helper processes that read a binary out or prove one loads."""

"""Exit 0 when some POCL device can build a kernel here; print which (clmagic's own probe)."""

import sys

import clmagic

for info in clmagic.list_devices():
    if "portable computing language" in info.platform_name.lower() and info.usable:
        print(f"POCL works: {info.platform_version} · {info.device_name}")
        sys.exit(0)
sys.exit(1)

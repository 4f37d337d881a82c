#!/usr/bin/env bash
# Sets up stitchlab on a fresh Debian/Ubuntu machine: system packages (libtorch, OpenBLAS,
# Fashion-MNIST, Python PyTorch for the reference tests, Chromium for the headless report test,
# build tools), npm packages, the native addon and the TypeScript build. Safe to run again: it
# skips what is already done.
#   --tests   also installs what only the tests need: Slurm's daemons and munge, for the test
#             that runs a single-node Slurm cluster (test/slurm.test.ts starts and stops it;
#             nothing is configured or left running on the machine).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n[setup] %s\n' "$*"; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "[setup] run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi

PKGS=(libtorch-dev python3-torch python3-torchvision dataset-fashion-mnist libopenblas0-pthread build-essential python3 binutils chromium)
for arg in "$@"; do
  case "$arg" in
    --tests) PKGS+=(slurmctld slurmd slurm-client munge) ;;
    *) echo "[setup] unknown option $arg (known: --tests)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
else
  say "Debian packages already installed: ${PKGS[*]}"
fi

# Debian's libtorch calls whatever libblas.so.3 the system selects; the reference BLAS is
# ~13x slower on a 1024x1024 matmul than OpenBLAS. Select OpenBLAS when it is not already.
alt="libblas.so.3-$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
blas=$(update-alternatives --query "$alt" 2>/dev/null | awk '/^Value:/ {print $2}')
openblas=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas | head -n 1 || true)
if [ -n "$openblas" ] && [ "$blas" != "$openblas" ]; then
  say "selecting OpenBLAS for $alt ($openblas)"
  $SUDO update-alternatives --set "$alt" "$openblas"
else
  say "BLAS: ${blas:-unknown}"
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "[setup] stitchlab needs Node.js 20 or newer (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi

say "installing npm packages (npm ci)"
# onnxruntime-node (the tests' ONNX oracle) would fetch CUDA binaries from nuget.org at install;
# the CPU build the tests use ships in the npm package itself.
ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund

say "building the native addon (skipped when up to date)"
npm run --silent build:native

say "building TypeScript"
npm run --silent build:ts

say "done: try ./bin/stitchlab.js doctor"

#!/usr/bin/env bash
# Install the Debian packages clproj needs, only those missing.
# Fast when everything is present (one dpkg-query); uses sudo when not root; when
# neither works, prints the exact command to run and fails.
set -euo pipefail

PACKAGES=(oclgrind liboclgrind-dev llvm-14-dev pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers
          clinfo g++ make python3-venv valgrind)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "clproj: installing missing system packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo"
else
    echo "clproj: cannot install packages (not root, no passwordless sudo)." >&2
    echo "Fix: run as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

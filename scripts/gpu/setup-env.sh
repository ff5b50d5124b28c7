#!/usr/bin/env bash
# Source on the lent GPU machine (Python 3.12, no registry access): installs the wheels
# carried in .whl/ and registers NVIDIA's OpenCL driver (present but not registered
# there) next to the system PoCL, as ../shared/design.md "Device machine" describes.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD
# launch records name their blobs by BLAKE3: without its wheel every recording run fails
python3 -c "import blake3" 2>/dev/null || { echo "setup-env: blake3 is missing: carry its wheel in .whl/ (pip download blake3 --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl)" >&2; return 1; }
mkdir -p /tmp/icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
for f in /etc/OpenCL/vendors/*.icd; do [ -e "$f" ] && cp "$f" /tmp/icd/; done
export OCL_ICD_VENDORS=/tmp/icd
export PYTHONUNBUFFERED=1

#!/usr/bin/env bash
# Source on the lent GPU machine (Python 3.12, no registry access): installs the wheels
# carried in .whl/ and registers NVIDIA's OpenCL driver (present but not registered
# there) next to the system PoCL, as ../shared/design.md "Device machine" describes.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/icd
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
for f in /etc/OpenCL/vendors/*.icd; do [ -e "$f" ] && cp "$f" /tmp/icd/; done
export OCL_ICD_VENDORS=/tmp/icd
export PYTHONUNBUFFERED=1

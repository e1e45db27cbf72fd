#!/usr/bin/env bash
# Compute targets (src/evalsweep/compute) and their tests.
#
# System: openssh-server and openssh-client (the ssh target's tests start a real
# sshd on a loopback port with a throwaway key and connect to it with ssh).
# Python: Ray and SkyPilot come with the "compute" extra, which "test" includes.
# Idempotent: installs only what is missing.
set -euo pipefail

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi
# sshd refuses to start without its privilege separation directory.
mkdir -p /run/sshd

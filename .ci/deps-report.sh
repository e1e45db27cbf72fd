#!/usr/bin/env bash
# Install steps for parts of evalsweep that need more than its Python dependencies.
# Idempotent: safe to run again on a machine that already has everything.
set -euo pipefail

# --- report: the HTML report (Plotly, inlined) and its browser tests ---------------------------
# The tests open the report in headless Chromium, driven by Selenium through chromedriver,
# with name resolution disabled: both come from Debian, so nothing is downloaded at test time.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
fi
python -m pip install -q "plotly>=5,<7" "selenium>=4,<5"

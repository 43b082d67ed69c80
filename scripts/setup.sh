#!/usr/bin/env bash
# One-command set-up: system packages, Java check, .venv with pinned dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
if ! command -v java >/dev/null 2>&1; then
    need_apt+=(openjdk-17-jre-headless)
fi
if ((${#need_apt[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian packages: ${need_apt[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    else
        echo "setup: please install these Debian packages: ${need_apt[*]}" >&2
        exit 1
    fi
fi

java_major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1])}')
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
    echo "setup: Java 17 or newer is required by Spark 4 (found: ${java_major:-none}); install openjdk-17-jre-headless" >&2
    exit 1
fi

PY=${PY:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[dev]'
echo "setup: done. Activate with: source .venv/bin/activate"

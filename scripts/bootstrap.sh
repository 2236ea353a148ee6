#!/usr/bin/env bash
# Create the venv and install the package (editable) with its test tools.
# Installs Debian's python3-venv first if this Python cannot create a venv.
set -euo pipefail
python=${1:-python3}
venv=${2:-.venv}

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "metastore needs Python >= 3.11; $python is $("$python" --version 2>&1)" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    if ! "$python" -m venv "$venv" 2>/dev/null; then
        echo "installing python3-venv (apt)" >&2
        rm -rf "$venv"
        sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
        $sudo apt-get update -qq && $sudo apt-get install -y -qq python3-venv
        "$python" -m venv "$venv"
    fi
fi
# The data pipeline (metastore audit/export) runs on Spark, which needs Java 17.
if ! command -v java >/dev/null 2>&1; then
    echo "installing Java 17 for Spark (apt: openjdk-17-jre-headless)" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq openjdk-17-jre-headless
fi
# The tests and benchmarks run Java programs from Maven Central (harness/maven/: the
# Apache Kafka broker); Maven fetches them (harness/jars.py, `make jars`).
if ! command -v mvn >/dev/null 2>&1; then
    echo "installing Maven for the Kafka broker's jars (apt: maven)" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq maven
fi
# The web console's tests drive the system's Chromium headless (Playwright only drives it).
if ! command -v chromium >/dev/null 2>&1; then
    echo "installing Chromium for the web console's browser tests (apt: chromium)" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e '.[test]'
echo "installed into $venv: $("$venv/bin/python" -c 'import metastore; print("metastore", metastore.__version__)')"

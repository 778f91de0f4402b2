#!/usr/bin/env bash
# Install what the clients in this folder need, from the OS packages (Debian, Ubuntu;
# as root): a C compiler and make, gfortran, libcurl and cJSON headers, R with httr and
# jsonlite, jq and curl, Node.js. Does nothing when everything is already there.
set -euo pipefail

missing() {
    local cmd
    for cmd in cc make gfortran Rscript jq curl awk node; do
        command -v "$cmd" >/dev/null || return 0
    done
    printf '#include <curl/curl.h>\n#include <cjson/cJSON.h>\n' | cc -E -x c - >/dev/null 2>&1 || return 0
    Rscript -e 'library(httr); library(jsonlite)' >/dev/null 2>&1 || return 0
    return 1
}

if missing; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends gcc libc6-dev make gfortran \
        libcurl4-openssl-dev libcjson-dev r-base-core r-cran-httr r-cran-jsonlite \
        jq curl gawk nodejs
fi

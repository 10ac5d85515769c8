#!/usr/bin/env bash
# Build the images of deploy/Dockerfile where no container daemon and no image registry exist,
# then smoke-test the gateway image against a demo bucket.
#
#   sudo deploy/image/build-local.sh [gateway|spark|all]     # default: gateway
#
# Needs root, Debian bookworm's `buildah` and `mmdebstrap` (apt-get install buildah mmdebstrap), curl,
# and the repository's .venv (it writes the smoke test's demo bucket).
# Steps:
#  1. mmdebstrap makes a Debian bookworm root file system with python3 (3.11) and python3-venv;
#     buildah commits it as localhost/debian-python:bookworm, the stand-in for the official
#     python:3.11-slim-bookworm (which cannot be pulled here).
#  2. buildah bud builds deploy/Dockerfile with PYTHON_IMAGE set to that base. Docker format, not
#     OCI, so the HEALTHCHECK is kept. Chroot isolation: no daemon, no cgroup setup.
#  3. The gateway image's entrypoint runs as 10001:10001 (`buildah run`) with a demo bucket, a key
#     pair and the writable volume mounted as in Kubernetes; /readyz and a records request must
#     answer 200, `tiered-gateway probe` (the HEALTHCHECK) must exit 0, then SIGTERM must stop it.
#     The spark image runs a real `export` of the demo's encrypted topic with a local master.
#
# Environment: WORK (scratch folder, default /tmp/tiered-gateway-image), MIRROR (Debian mirror),
# PORT (the smoke test's port, default 18081), EXTRA_CA (a CA bundle the local base trusts; by
# default the host's /etc/ssl/certs/ca-certificates.crt, for egress proxies that re-sign TLS).
set -euo pipefail

readonly TARGETS="${1:-gateway}"
readonly WORK="${WORK:-/tmp/tiered-gateway-image}"
readonly MIRROR="${MIRROR:-http://deb.debian.org/debian}"
readonly PORT="${PORT:-18081}"
readonly EXTRA_CA="${EXTRA_CA:-/etc/ssl/certs/ca-certificates.crt}"
readonly BASE=localhost/debian-python:bookworm
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly REPO

log() { printf '==> %s\n' "$*" >&2; }

require() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { log "missing $tool (apt-get install $tool)"; exit 1; }
    done
}

make_base() {
    if buildah inspect --type image "$BASE" >/dev/null 2>&1; then
        log "base $BASE exists"
        return
    fi
    mkdir -p "$WORK"
    if [[ ! -s "$WORK/rootfs.tar" ]]; then
        log "mmdebstrap: bookworm minbase + python3, python3-venv, ca-certificates"
        mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$WORK/rootfs.tar" "$MIRROR"
    fi
    local ctr mnt
    ctr="$(buildah from scratch)"
    mnt="$(buildah mount "$ctr")"
    tar -C "$mnt" -xf "$WORK/rootfs.tar"
    if [[ -s "$EXTRA_CA" ]]; then  # a superset of Debian's bundle where a proxy re-signs TLS
        cp "$EXTRA_CA" "$mnt/etc/ssl/certs/ca-certificates.crt"
    fi
    buildah umount "$ctr" >/dev/null
    # pip's own CA bundle (certifi) would not know a proxy's CA: point it at the system's.
    buildah config --env LANG=C.UTF-8 --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
        --cmd python3 "$ctr"
    buildah commit --rm "$ctr" "$BASE" >/dev/null
    log "base $BASE committed"
}

build() {  # build TARGET TAG
    local version revision source
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml")"
    revision="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
    source="$(git -C "$REPO" config --get remote.origin.url 2>/dev/null || true)"
    log "buildah bud --target $1 -> $2 (version $version, revision $revision)"
    buildah bud --isolation chroot --format docker --layers \
        --build-arg "PYTHON_IMAGE=$BASE" \
        --build-arg "VERSION=$version" \
        --build-arg "REVISION=$revision" \
        ${source:+--build-arg "SOURCE=$source"} \
        -f "$REPO/deploy/Dockerfile" --target "$1" -t "$2" "$REPO"
}

python_descendant() {  # the first python3 process below PID (buildah run -> chroot exec -> app)
    local child
    for child in $(pgrep -P "$1" || true); do
        if [[ "$(ps -o comm= -p "$child")" == python3* ]]; then
            echo "$child"
            return
        fi
        python_descendant "$child"
    done
}

prepare_demo() {  # the demo bucket (5 topics, one encrypted) and its key pair, mode 0400, uid 10001
    local dir="$WORK/smoke"
    [[ -s "$dir/keys/demo.pem" ]] && return
    rm -rf "$dir"
    mkdir -p "$dir/keys" "$dir/out"
    "$REPO/.venv/bin/python" -c 'import sys; from pathlib import Path
from gateway.demo.bucket import write_demo_bucket
write_demo_bucket(Path(sys.argv[1]))' "$dir/demo"
    cp "$dir/demo/keys/demo.pem" "$dir/keys/demo.pem"
    chown -R 10001:10001 "$dir/keys" "$dir/out"
    chmod 0400 "$dir/keys/demo.pem"
}

smoke_gateway() {  # the entrypoint as in Kubernetes: non-root, mounted bucket, key and volume
    local image=$1 dir="$WORK/smoke" ctr pid code=000 i
    prepare_demo
    ctr="$(buildah from "$image")"
    buildah run --isolation chroot --user 10001:10001 "$ctr" -- tiered-gateway --version
    local -a run=(buildah run --isolation chroot --user 10001:10001
        -v "$dir/demo/bucket:/bucket:ro" -v "$dir/keys:/etc/tiered-gateway/keys:ro"
        -e TIERED_GATEWAY_STORE=file:///bucket -e TIERED_GATEWAY_KEY_PREFIX=demo/
        -e TIERED_GATEWAY_KEY_PAIRS=demo=/etc/tiered-gateway/keys/demo.pem
        -e TIERED_GATEWAY_ALLOW_ANONYMOUS=true -e TIERED_GATEWAY_ALLOWED_HOSTS=localhost
        -e "TIERED_GATEWAY_PORT=$PORT" -e TIERED_GATEWAY_WORKERS=1 "$ctr" --)
    "${run[@]}" tiered-gateway serve >"$dir/serve.log" 2>&1 &
    pid=$!
    for i in $(seq 1 120); do
        code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz" || true)"
        [[ "$code" == 200 ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    log "GET /readyz: $code after ${i}s"
    local ok=0
    if [[ "$code" == 200 ]]; then
        code="$(curl -s -o "$dir/records.json" -w '%{http_code}' \
            "http://127.0.0.1:$PORT/v1/topics/payments/partitions/0/records?offset=0&max_bytes=4096")"
        log "GET payments records (the encrypted topic): $code, $(wc -c <"$dir/records.json") bytes"
        # The HEALTHCHECK's command, with the same settings, beside the server.
        if [[ "$code" == 200 ]] && "${run[@]}" tiered-gateway probe; then
            log "tiered-gateway probe: exit 0"
            ok=1
        fi
    fi
    # SIGTERM to the gateway's Python process (buildah run does not forward signals to it).
    local app
    app="$(python_descendant "$pid" | head -n1)"
    local t0=$SECONDS
    kill -TERM "${app:-$pid}"
    wait "$pid" || true
    log "SIGTERM: the gateway stopped within $((SECONDS - t0))s"
    buildah rm "$ctr" >/dev/null
    tail -n 3 "$dir/serve.log" >&2
    [[ "$ok" == 1 ]] || { log "smoke test failed: $dir/serve.log"; exit 1; }
    log "smoke test passed"
}

smoke_spark() {  # a real `export` with a local Spark master: the encrypted topic to Parquet
    local image=$1 dir="$WORK/smoke" ctr
    prepare_demo
    rm -rf "$dir/out/payments"
    ctr="$(buildah from "$image")"
    buildah run --isolation chroot --user 10001:10001 "$ctr" -- java -version
    # SPARK_LOCAL_IP only here: buildah's chroot has a host name that /etc/hosts does not resolve
    # (a pod's does).
    buildah run --isolation chroot --user 10001:10001 -e SPARK_LOCAL_IP=127.0.0.1 \
        -v "$dir/demo/bucket:/bucket:ro" -v "$dir/keys:/etc/tiered-gateway/keys:ro" \
        -v "$dir/out:/out" "$ctr" -- tiered-gateway export --store file:///bucket \
        --key-prefix demo/ --key-pair demo=/etc/tiered-gateway/keys/demo.pem --topic payments \
        --isolation-level read_committed --output /out/payments --master 'local[2]' --quiet
    buildah rm "$ctr" >/dev/null
    [[ -e "$dir/out/payments/_SUCCESS" ]] || { log "spark smoke test failed"; exit 1; }
    log "spark smoke test passed: $(find "$dir/out/payments" -name '*.parquet' | wc -l) Parquet files"
}

main() {
    case "$TARGETS" in
        gateway | spark | all) ;;
        *) log "usage: $0 [gateway|spark|all]"; exit 2 ;;
    esac
    [[ "$(id -u)" == 0 ]] || { log "run as root (buildah without a user namespace setup)"; exit 1; }
    require buildah mmdebstrap curl git
    make_base
    if [[ "$TARGETS" != spark ]]; then
        build gateway localhost/tiered-gateway:dev
        smoke_gateway localhost/tiered-gateway:dev
    fi
    if [[ "$TARGETS" != gateway ]]; then
        build spark localhost/tiered-gateway-spark:dev
        smoke_spark localhost/tiered-gateway-spark:dev
    fi
    buildah images --filter reference='localhost/tiered-gateway*'
}

main

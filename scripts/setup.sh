#!/usr/bin/env bash
# One-command set-up: system packages, Java check, .venv with pinned dependencies, the JVM
# jars (Apache Kafka broker, Spark's Kafka connector) resolved with Maven into jvm/lib, and the
# project's JVM operators compiled into jvm/lib/operators.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    need_apt+=(openjdk-17-jdk-headless) # javac: the project's JVM operators (jvm/operators)
fi
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
# `ip` (netns, veth, bridge): the multi-host tests give each process a network namespace.
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# openssl: the local Kubernetes' certificates and the secured-Kafka tests' PEM keys;
# unshare: the node agent's pod mount namespaces.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
# Headless Chromium: the tests look at the documentation site's pages as a browser renders them.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# stress-ng: the demo's test keeps both cores busy beside it, as a user's laptop is.
command -v stress-ng >/dev/null 2>&1 || need_apt+=(stress-ng)
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
.venv/bin/pip install -q -e '.[demo,dev]'

# JVM jars: each pom's dependencies into jvm/lib/<name>, once; a stamp (the pom's checksum)
# makes a second run quick and offline.
resolve() { # name, extra copy-dependencies flags
    local name=$1 dir=jvm/lib/$1 stamp
    stamp=$(sha256sum "jvm/$name/pom.xml" | cut -d' ' -f1)
    if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ]; then
        return
    fi
    echo "setup: resolving the $name jars with Maven"
    rm -rf "$dir"
    (cd "jvm/$name" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="../lib/$name" "${@:2}")
    echo "$stamp" >"$dir/.stamp"
}
resolve broker
# Only what pyspark does not ship already (it has Scala, Hadoop, compression codecs...).
resolve connector \
    -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
# async-profiler (ap-loader), for the benchmarks' JVM profiles (docs/sustainable.md).
resolve profiler
pyspark_version=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')
if ! ls "jvm/lib/connector/spark-sql-kafka-0-10_2.13-$pyspark_version.jar" >/dev/null 2>&1; then
    echo "setup: pyspark $pyspark_version differs from the connector in jvm/connector/pom.xml" >&2
    exit 1
fi
# The project's JVM operators (jvm/operators/src: Spark state functions and the exactly-once
# writer the pipelines call through py4j), compiled against pyspark's own jars and the
# connector's (kafka-clients) into jvm/lib/operators; rebuilt when a
# source, pyspark or the connector changes (a stamp of their checksums and names).
build_operators() {
    local dir=jvm/lib/operators stamp pyspark_jars
    pyspark_jars=$(.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
    stamp=$( (find jvm/operators/src -name '*.java' -print0 | sort -z | xargs -0 sha256sum; echo "$pyspark_version"; ls jvm/lib/connector) | sha256sum | cut -d' ' -f1)
    if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$stamp" ]; then
        return
    fi
    echo "setup: compiling the JVM operators against pyspark $pyspark_version"
    rm -rf "$dir" jvm/operators/build
    mkdir -p "$dir" jvm/operators/build
    find jvm/operators/src -name '*.java' -print0 | xargs -0 javac --release 17 -Xlint:all,-path -Werror \
        -cp "$pyspark_jars/*:jvm/lib/connector/*" -d jvm/operators/build
    jar --create --file "$dir/streamscale-operators.jar" -C jvm/operators/build .
    rm -rf jvm/operators/build
    echo "$stamp" >"$dir/.stamp"
}
build_operators
# Helm, to render the chart in deploy/helm in the tests: built once from the Go module proxy
# into build/bin (git-ignored), with the version and default Kubernetes version (1.37, its
# client-go's) that the official build stamps in; a stamp makes a second run a no-op.
HELM_VERSION=v3.22.0
if [ ! -x build/bin/helm ] || [ "$(cat build/bin/.helm-version 2>/dev/null)" != "$HELM_VERSION" ]; then
    if ! command -v go >/dev/null 2>&1; then
        echo "setup: Go 1.21 or newer is needed to build helm (it fetches the toolchain helm needs)" >&2
        exit 1
    fi
    echo "setup: building helm $HELM_VERSION from the Go module proxy into build/bin"
    mkdir -p build/bin
    GOBIN="$PWD/build/bin" GOFLAGS=-buildvcs=false go install -ldflags "\
-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    echo "$HELM_VERSION" >build/bin/.helm-version
fi
# A Kubernetes control plane for the Kubernetes tests and `streamscale kube start`: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, built from the pinned
# Go modules of deploy/kube (go.mod/go.sum: k8s.io/kubernetes with its staging modules at
# their published versions, etcd's server) into build/bin, with the version stamped in as
# the official build does. A stamp (go.sum's checksum and the version) skips a second run.
# Cold (empty Go build cache) about 6 min of both cores; see docs/how-to/kubernetes.md.
KUBE_VERSION=v1.36.3
build_kube() {
    local stamp ldflags key
    stamp="$(sha256sum deploy/kube/go.sum | cut -d' ' -f1) $KUBE_VERSION"
    if [ "$(cat build/bin/.kube-stamp 2>/dev/null)" = "$stamp" ] &&
        [ -x build/bin/kube-apiserver ] && [ -x build/bin/etcd ]; then
        return
    fi
    echo "setup: building etcd and Kubernetes $KUBE_VERSION (apiserver, controller-manager, scheduler, kubectl) into build/bin"
    mkdir -p build/bin
    ldflags="-s -w"
    for key in client-go/pkg/version component-base/version; do
        ldflags+=" -X k8s.io/$key.gitVersion=$KUBE_VERSION -X k8s.io/$key.gitMajor=1"
        ldflags+=" -X k8s.io/$key.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2)"
        ldflags+=" -X k8s.io/$key.gitTreeState=clean"
    done
    (cd deploy/kube && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o ../../build/bin/ \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl &&
        CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o ../../build/bin/etcd go.etcd.io/etcd/server/v3)
    echo "$stamp" >build/bin/.kube-stamp
}
build_kube
# Class-data sharing archives of a Kafka node's and a Spark driver's classes (jvm/lib/cds):
# their JVMs then start on about a third less CPU. Recorded once per set of jars.
.venv/bin/python -m streamscale.class_archives
echo "setup: done ($(du -sh jvm/lib | cut -f1) of jars and class archives in jvm/lib). Activate with: source .venv/bin/activate"

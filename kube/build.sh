#!/usr/bin/env bash
# Builds the Kubernetes parts of `slinkyml dev kube` from Go modules with the ordinary go client:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy (controlplane/), etcd (etcd/),
# CoreDNS with the cluster-DNS plugins only (coredns/: our main over coredns' coremain), the
# slurm-operator's manager and webhook at each pinned version (operator-LABEL/: operator-v1.2.1, the newest
# release, and operator-f2ed3fc, the revision of the CRDs we render for) and the pod sandbox's pause program
# (pause/, our own), into a cache keyed by every pinned version:
#   ${SLINKYML_KUBE_CACHE:-/var/lib/slinkyml/kube}/<key>/bin
# A complete cache (bin/.complete) is reused as it is; a build goes to a temporary folder that is
# renamed into place, so an interrupted build leaves nothing that looks complete. build.log records
# /usr/bin/time -v for every step (cold build time, peak memory).
#
#   kube/build.sh            build if missing, print the bin folder
#   kube/build.sh --bindir   print the bin folder; exit 1 (with the command to run) when not built
#   kube/build.sh --key      print the cache key
#
# A file-based Go module mirror at <repo>/../shared/go-modules (where this project's machines keep the
# slurm-operator versions the public proxy refuses, its README) is put in front of the usual GOPROXY only
# when that folder exists; the committed go.sum files hold the same hashes either way.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${SLINKYML_KUBE_CACHE:-/var/lib/slinkyml/kube}
mirror="$here/../../shared/go-modules"
if [[ -d "$mirror" ]]; then
    GOPROXY="file://$(realpath "$mirror"),$(go env GOPROXY)"
    GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/SlinkyProject"
    export GOPROXY GONOSUMDB
fi

# the version a module's go.mod pins for a dependency (a require block line or a one-line require)
pinned() {
    awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$here/$1/go.mod"
}

k8s_version=$(pinned controlplane k8s.io/kubernetes)
etcd_version=$(pinned etcd go.etcd.io/etcd/server/v3)
coredns_version=$(pinned coredns github.com/coredns/coredns)
# one module per operator version, named operator-LABEL (the label `dev kube up --operator-version` takes)
operator_labels=()
for dir in "$here"/operator-*/; do
    dir=${dir%/}; operator_labels+=("${dir##*/operator-}")
done
operator_versions=$(for label in "${operator_labels[@]}"; do
    pinned "operator-$label" github.com/SlinkyProject/slurm-operator; done | paste -sd+)
go_version=$(go env GOVERSION)
sources_hash=$(cd "$here" && cat build.sh crds.txt {controlplane,etcd,coredns,operator-*}/go.{mod,sum} etcd/main.go \
    coredns/main.go pause/go.mod pause/main.go | sha256sum | cut -c1-12)
# --- helm (begin) ---
# Helm (kube/helm: helm.sh/helm/v3's cmd/helm, which slinkyml/dev/kubernetes/helm.py drives) has a cache entry of its own,
# helm-VERSION_GO_HASH, so that adding or changing it never rebuilds the parts above: their key hashes this
# file less these helm blocks, byte for byte the file as it was before Helm was added (the line above
# stays as it was; this one replaces its value).
# Comment lines (# and //) are left out of both keys: a comment never rebuilds anything.
sources_hash=$(cd "$here" && { sed '/^# --- helm (begin) ---$/,/^# --- helm (end) ---$/d' build.sh; \
    cat crds.txt {controlplane,etcd,coredns,operator-*}/go.{mod,sum} etcd/main.go coredns/main.go pause/go.mod \
    pause/main.go; } | grep -Ev '^[[:space:]]*(#|//)' | sha256sum | cut -c1-12)
helm_version=$(pinned helm helm.sh/helm/v3)
helm_hash=$(cd "$here" && { sed -n '/^# --- helm (begin) ---$/,/^# --- helm (end) ---$/p' build.sh; \
    cat helm/go.mod helm/go.sum; } | grep -Ev '^[[:space:]]*(#|//)' | sha256sum | cut -c1-12)
helm_dest="$cache_root/helm-${helm_version}_${go_version}_${helm_hash}"

build_helm() {  # Helm into its cache entry unless it is complete; prints the bin folder
    if [[ ! -e "$helm_dest/bin/.complete" ]]; then
        mkdir -p "$cache_root"
        (
            exec 8>"$cache_root/.lock-helm"
            flock 8
            [[ -e "$helm_dest/bin/.complete" ]] && exit 0
            work=$(mktemp -d "$cache_root/.build-helm.XXXXXX")
            trap 'rm -rf "$work"' EXIT
            mkdir -p "$work/bin"
            # what helm's Makefile stamps: the release (no "unreleased" metadata) and, for charts'
            # kubeVersion checks and `helm template`, the Kubernetes version of the client-go it is built with
            client_go=$(pinned helm k8s.io/client-go)
            minor=${client_go#v0.}; minor=${minor%%.*}
            ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
            ldflags+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
            for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
                ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
            done
            echo "kube/build.sh: building helm $helm_version (its own cache entry; log: $work/build.log)" >&2
            began=$SECONDS
            (cd "$here/helm" && CGO_ENABLED=0 /usr/bin/time -v go build -trimpath -ldflags "$ldflags" \
                -o "$work/bin/" helm.sh/helm/v3/cmd/helm) >>"$work/build.log" 2>&1 \
                || { tail -40 "$work/build.log" >&2; exit 1; }
            echo "kube/build.sh: built helm in $((SECONDS - began)) s" >&2
            printf '{"helm": "%s", "client-go": "%s", "go": "%s"}\n' "$helm_version" "$client_go" "$go_version" \
                >"$work/versions.json"
            touch "$work/bin/.complete"
            rm -rf "$helm_dest"
            mv "$work" "$helm_dest"
            trap - EXIT
            chmod 755 "$helm_dest"
        )
    fi
    echo "$helm_dest/bin"
}

case "${1:-}" in
    --helm) build_helm; exit 0 ;;
    --helm-bindir)
        if [[ -e "$helm_dest/bin/.complete" ]]; then echo "$helm_dest/bin"; exit 0; fi
        echo "helm ($helm_dest) is not built: run \`make kube\` (kube/build.sh --helm)" >&2
        exit 1 ;;
esac
# --- helm (end) ---
key="k8s-${k8s_version}_etcd-${etcd_version}_coredns-${coredns_version}_slurm-operator-${operator_versions}"
key+="_${go_version}_${sources_hash}"
dest="$cache_root/$key"

case "${1:-}" in
    --key) echo "$key"; exit 0 ;;
    --bindir)
        if [[ -e "$dest/bin/.complete" ]]; then echo "$dest/bin"; exit 0; fi
        echo "the Kubernetes binaries ($key) are not built: run \`make kube\` (kube/build.sh)" >&2
        exit 1 ;;
    "") ;;
    *) echo "usage: kube/build.sh [--bindir|--key]" >&2; exit 2 ;;
esac

# --- helm (begin) ---
# Helm too: now when the parts are built (the next line exits), else after them (the end of this file)
if [[ -e "$dest/bin/.complete" ]]; then build_helm >/dev/null; fi
# --- helm (end) ---
if [[ -e "$dest/bin/.complete" ]]; then echo "$dest/bin"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [[ -e "$dest/bin/.complete" ]]; then echo "$dest/bin"; exit 0; fi

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
log="$work/build.log"

# Kubernetes' own builds (hack/lib/version.sh) stamp the version into component-base and client-go;
# without it the server reports v0.0.0-master and charts' kubeVersion checks refuse it.
minor=${k8s_version#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean"
done

step() {  # step NAME MODULE_DIR OUT_DIR LDFLAGS PACKAGE...
    local name=$1 dir=$2 out=$3 ldflags=$4
    shift 4
    mkdir -p "$out"
    echo "== $name: go build $* ($(date -u +%FT%TZ))" >>"$log"
    done_parts=$((done_parts + 1))
    local remaining=("${parts[@]:done_parts}")
    echo "kube/build.sh: [$done_parts/${#parts[@]}] building $name ($((SECONDS / 60))m$((SECONDS % 60))s in;" \
        "then: ${remaining[*]:-nothing}; minutes each on a cold cache; log: $log)" >&2
    # a line every 30 s: a cold build is silent for many minutes
    local began=$SECONDS
    ( while sleep 30; do echo "kube/build.sh:   ... still building $name ($((SECONDS - began)) s)" >&2; done ) &
    local ticker=$!
    local status=0
    (cd "$here/$dir" && CGO_ENABLED=0 /usr/bin/time -v go build -trimpath -ldflags "$ldflags" \
        -o "$out/" "$@") >>"$log" 2>&1 || status=$?
    kill "$ticker" 2>/dev/null || true
    if [[ $status -ne 0 ]]; then tail -40 "$log" >&2; exit 1; fi
    echo "kube/build.sh: built $name in $((SECONDS - began)) s" >&2
}

# the parts in build order, for the progress lines (part, time so far, what remains)
parts=(etcd control-plane coredns pause)
for label in "${operator_labels[@]}"; do parts+=("slurm-operator-$label"); done
done_parts=0
step etcd etcd "$work/bin" "-s -w" .
step control-plane controlplane "$work/bin" "$k8s_ldflags" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy
step coredns coredns "$work/bin" "-s -w" .
step pause pause "$work/bin" "-s -w" .
# Each operator version: bin/slurm-operator-LABEL/{manager,webhook}, and its own webhook configuration
# (config/webhook/manifests.yaml of the module at that version; read at run time, never committed).
operators_json=""
for label in "${operator_labels[@]}"; do
    step "slurm-operator $label" "operator-$label" "$work/bin/slurm-operator-$label" "-s -w" \
        github.com/SlinkyProject/slurm-operator/cmd/manager github.com/SlinkyProject/slurm-operator/cmd/webhook
    mkdir -p "$work/operator-$label"
    operator_dir=$(cd "$here/operator-$label" && go list -m -f '{{.Dir}}' github.com/SlinkyProject/slurm-operator)
    cp "$operator_dir/config/webhook/manifests.yaml" "$work/operator-$label/webhook-manifests.yaml"
    operators_json+="${operators_json:+, }\"$label\": \"$(pinned "operator-$label" github.com/SlinkyProject/slurm-operator)\""
done

# The CRDs that crds.txt lists, from the modules that ship them (read at run time, never committed).
mkdir -p "$work/crds"
while read -r module file; do
    [[ -z "$module" || "$module" == \#* ]] && continue
    dir=$(cd "$here/controlplane" && go mod download -json "$module" | awk -F'"' '$2 == "Dir" { print $4 }')
    [[ -n "$dir" && -f "$dir/$file" ]] || { echo "kube/build.sh: $module has no $file" >&2; exit 1; }
    cp "$dir/$file" "$work/crds/"
done <"$here/crds.txt"
chmod -R u+w "$work"

cat >"$work/versions.json" <<EOF
{"kubernetes": "$k8s_version", "etcd": "$etcd_version", "coredns": "$coredns_version", "slurm-operators": {$operators_json},
 "go": "$go_version", "key": "$key"}
EOF
touch "$work/bin/.complete"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
chmod 755 "$dest"
echo "$dest/bin"
# --- helm (begin) ---
build_helm >/dev/null
# --- helm (end) ---

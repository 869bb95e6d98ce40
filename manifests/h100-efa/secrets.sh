#!/bin/sh
# Creates a Slinky cluster's credential Secrets (slurm key, JWT key, database passwords) that do not
# exist yet, with kubectl, from random files written 0600 in a private folder removed on exit. Never
# prints a value; a Secret that exists is kept (rotating one is a deliberate `kubectl delete` first).
# `slinkyml cluster render` writes it as secrets.sh with this cluster's arguments; both install routes
# (kubectl apply -f rendered/ and the slurm Helm chart, whose values name these Secrets with
# create: false) run it first. `slinkyml cluster apply` does the same through the API.
#
# Usage: cluster-secrets.sh NAMESPACE LABELS NAME:KEY:BYTES:FORM [...]
#   LABELS  comma-separated key=value labels for each Secret
#   FORM    binary (BYTES random bytes), text (printable: it ends up in a MySQL client config) or
#           required (a Secret the spec names as the user's own: never made here, only checked)
set -eu

[ "$#" -gt 0 ] || set -- slurm app.kubernetes.io/managed-by=slinkyml,app.kubernetes.io/part-of=llm,app.kubernetes.io/component=credentials,slinkyml.io/cluster=llm llm-slurm-key:slurm.key:1024:binary llm-jwt-key:jwt_hs256.key:64:binary llm-mariadb-password:password:32:text llm-mariadb-root:password:32:text
namespace=$1
labels=$2
shift 2

umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

kubectl get namespace "$namespace" >/dev/null 2>&1 || kubectl create namespace "$namespace" >/dev/null

for entry in "$@"; do
    name=${entry%%:*}
    rest=${entry#*:}
    key=${rest%%:*}
    rest=${rest#*:}
    bytes=${rest%%:*}
    form=${rest#*:}
    if kubectl get secret --namespace "$namespace" "$name" >/dev/null 2>&1; then
        echo "secret $namespace/$name exists: kept"
        continue
    fi
    if [ "$form" = required ]; then
        echo "cluster-secrets.sh: secret $namespace/$name (key $key) is named in cluster.yaml's secrets: as" \
            "yours but does not exist: create it first" >&2
        exit 1
    fi
    file="$work/$key"
    case $form in
        binary) head -c "$bytes" /dev/urandom >"$file" ;;
        text) head -c "$bytes" /dev/urandom | base64 | tr -d '\n+/=' >"$file" ;;
        *) echo "cluster-secrets.sh: unknown form '$form' for $name" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2046  # one word per label: LABELS has no spaces (DNS names and labels)
    kubectl create secret generic "$name" --namespace "$namespace" --from-file="$key=$file" \
        --dry-run=client -o yaml | kubectl label --local -f - -o yaml $(echo "$labels" | tr ',' ' ') \
        | kubectl create -f - >/dev/null
    rm -f "$file"
    echo "secret $namespace/$name created"
done

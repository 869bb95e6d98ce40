#!/bin/sh
# Runs a rendered cluster's INSTALL.md, step by step, in order. `slinkyml cluster render` writes it as
# install.sh beside INSTALL.md with this cluster's steps filled in (one KIND TITLE COMMAND DEVKUBE
# quadruple per INSTALL.md step, the same list INSTALL.md is written from), so the two cannot drift.
#
#   TARGET=eks      [ROUTE=kubectl|helm] [FROM=N] sh install.sh   the current kubectl context is the EKS cluster
#   TARGET=dev-kube [ROUTE=kubectl|helm] [FROM=N] sh install.sh   KUBECONFIG from `eval $(slinkyml dev kube env)`
#
# TARGET=eks runs each step's command as INSTALL.md shows it. The Karpenter prerequisites take the subnet
# and security group ids from $SUBNET_IDS and $NODE_SECURITY_GROUP, the training images' build its context
# from $SLINKYML_SOURCE (a slinkyml checkout); a command with any other <placeholder>
# stops the script with what to fill in (rerun with FROM=N once done by hand).
# TARGET=dev-kube runs every step that needs no AWS against `slinkyml dev kube`, and says for each other
# step why it is skipped (AWS only, not built here) and what the plane serves instead (checked).
# ROUTE=kubectl applies rendered/ (kubectl apply --server-side); ROUTE=helm installs the slurm chart with
# helm/values.yaml after applying the files of rendered/ whose objects the chart does not make. On
# dev-kube the helm route installs the charts from $CHARTS (a folder holding slurm-operator-crds,
# slurm-operator and slurm: the operator's Go module's helm/ folders; `slinkyml dev kube charts` prints it).
set -eu

# shellcheck disable=SC2016
set -- cert-manager \
    cert-manager \
    'helm install cert-manager cert-manager --repo https://charts.jetstack.io --namespace cert-manager --create-namespace --set crds.enabled=true' \
    'not built here: dev kube signs the operator webhook'"'"'s serving certificate with its own CA and registers it with that caBundle (the chart'"'"'s certManager.enabled=false alternative)' \
    operator-crds \
    'slurm-operator-crds 1.2.1' \
    'helm install slurm-operator-crds oci://ghcr.io/slinkyproject/charts/slurm-operator-crds --version 1.2.1' \
    'served by dev kube (the vendored CRDs, applied by `dev kube up`; ROUTE=helm: the chart from the operator'"'"'s Go module takes them over)' \
    operator \
    'slurm-operator 1.2.1' \
    'helm install slurm-operator oci://ghcr.io/slinkyproject/charts/slurm-operator --version 1.2.1 --namespace slinky --create-namespace --set crds.enabled=false --set certManager.enabled=true' \
    'dev kube runs the operator'"'"'s manager and webhook, built from its Go module (kube/build.sh); ROUTE=helm also installs the chart with certManager.enabled=false and its webhook off (no node runs the chart'"'"'s pods; the plane'"'"'s webhook judges)' \
    karpenter-aws \
    'Karpenter'"'"'s AWS prerequisites (AWS only)' \
    'curl -fsSL https://raw.githubusercontent.com/aws/karpenter-provider-aws/v1.14.1/website/content/en/preview/getting-started/getting-started-with-karpenter/cloudformation.yaml -o karpenter-cloudformation.yaml && aws cloudformation deploy --stack-name Karpenter-trainium-eks --template-file karpenter-cloudformation.yaml --capabilities CAPABILITY_NAMED_IAM --parameter-overrides ClusterName=trainium-eks && aws eks create-access-entry --cluster-name trainium-eks --type EC2_LINUX --principal-arn arn:aws:iam::$(aws sts get-caller-identity --query Account --output text):role/KarpenterNodeRole-trainium-eks && aws ec2 create-tags --resources <your private subnet ids> <the node security group id> --tags Key=karpenter.sh/discovery,Value=trainium-eks' \
    'AWS only (CloudFormation, IAM, EKS access entries, EC2 tags)' \
    karpenter \
    'Karpenter 1.14.1' \
    'helm upgrade --install karpenter oci://public.ecr.aws/karpenter/karpenter --version 1.14.1 --namespace kube-system --set settings.clusterName=trainium-eks --set settings.interruptionQueue=trainium-eks --wait' \
    'needs AWS (the controller launches EC2 instances and reads the interruption queue); dev kube serves its NodePool and EC2NodeClass CRDs from the karpenter-provider-aws module, so the objects are stored, no node is launched' \
    storageclass= \
    'a default StorageClass (aws-ebs-csi-driver, provisioner ebs.csi.aws.com)' \
    'helm upgrade -i aws-ebs-csi-driver aws-ebs-csi-driver --repo https://kubernetes-sigs.github.io/aws-ebs-csi-driver -n kube-system' \
    'the EBS CSI driver is AWS only (EBS volumes) and skipped; the StorageClass is applied' \
    fsx \
    'aws-fsx-csi-driver (chart 1.17.0, driver 1.9.0)' \
    'helm upgrade -i aws-fsx-csi-driver aws-fsx-csi-driver --repo https://kubernetes-sigs.github.io/aws-fsx-csi-driver --version 1.17.0 -n kube-system' \
    'AWS only (FSx for Lustre)' \
    device-plugin \
    'aws-efa-k8s-device-plugin (chart v0.5.30 (plugin v0.5.20))' \
    'helm upgrade -i efa aws-efa-k8s-device-plugin --repo https://aws.github.io/eks-charts --version v0.5.30 -n kube-system -f helm/device-plugins/efa.yaml' \
    'needs nodes with the device (GPU, Neuron or EFA instances on AWS)' \
    device-plugin \
    'neuron-helm-chart (chart 1.1.2 or later)' \
    'helm upgrade -i neuron-helm-chart oci://public.ecr.aws/neuron/neuron-helm-chart -n kube-system -f helm/device-plugins/neuron.yaml' \
    'needs nodes with the device (GPU, Neuron or EFA instances on AWS)' \
    images \
    'the training images' \
    'docker build -f '"'"'<a slinkyml source checkout>'"'"'/containers/login/Dockerfile --build-arg SLURM_TAG=26.05-ubuntu26.04 -t 123456789012.dkr.ecr.us-west-2.amazonaws.com/slinkyml/login:26.05 '"'"'<a slinkyml source checkout>'"'"' && docker push 123456789012.dkr.ecr.us-west-2.amazonaws.com/slinkyml/login:26.05 && docker build -f '"'"'<a slinkyml source checkout>'"'"'/containers/worker-neuron/Dockerfile --build-arg SLURM_TAG=26.05-ubuntu24.04 -t 123456789012.dkr.ecr.us-west-2.amazonaws.com/slinkyml/worker-neuron:26.05 '"'"'<a slinkyml source checkout>'"'"' && docker push 123456789012.dkr.ecr.us-west-2.amazonaws.com/slinkyml/worker-neuron:26.05' \
    'needs a registry the nodes pull from; dev kube has none: its live pod tests build the worker and login images here from the Debian sid root with the same training stack and name them through images.registry' \
    secrets \
    'the credential Secrets' \
    'sh secrets.sh' \
    'runs as on EKS' \
    objects=slurm-trn \
    'the cluster'"'"'s objects' \
    'oci://ghcr.io/slinkyproject/charts/slurm --version 1.2.1' \
    'runs as on EKS'

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
target=${TARGET:-}
route=${ROUTE:-kubectl}
from=${FROM:-1}

die() { echo "install.sh: $*" >&2; exit 1; }

case $target in
    eks | dev-kube) ;;
    *) die "TARGET=${target:-(unset)}: set TARGET=eks (the current kubectl context) or TARGET=dev-kube (slinkyml dev kube)" ;;
esac
case $route in
    kubectl | helm) ;;
    *) die "ROUTE=$route: one of kubectl, helm" ;;
esac
case $from in
    '' | *[!0-9]*) die "FROM=$from: a step number" ;;
esac
if [ "$#" -eq 0 ] || [ $(($# % 4)) -ne 0 ]; then die "no steps (render this file with slinkyml cluster render)"; fi
command -v kubectl >/dev/null || die "kubectl is not on PATH"
if [ "$route" = helm ]; then
    command -v helm >/dev/null || die "ROUTE=helm: helm is not on PATH (kube/build.sh --helm builds one)"
    if [ "$target" = dev-kube ]; then
        if [ -z "${CHARTS:-}" ] || [ ! -d "${CHARTS:-}/slurm" ]; then
            die "ROUTE=helm TARGET=dev-kube: set CHARTS to the operator module's charts (slinkyml dev kube charts)"
        fi
    fi
fi
if [ "$target" = dev-kube ]; then
    # `dev kube env`'s kubeconfig names its cluster slinkyml-dev; any other context is not the plane
    cluster=$(kubectl config view --minify -o jsonpath='{.clusters[0].name}' 2>/dev/null || true)
    [ "$cluster" = slinkyml-dev ] || die "TARGET=dev-kube: the kubectl context's cluster (${cluster:-none}) is" \
        "not slinkyml dev kube's (slinkyml-dev): eval \$(slinkyml dev kube env)"
fi

# the CRDs of a group must be served (Established) before objects of it are applied
established() {
    for crd in "$@"; do
        kubectl wait --for=condition=Established --timeout=60s "crd/$crd" >/dev/null \
            || die "CRD $crd is not served"
    done
}

skip() { echo "   skipped on dev-kube: $1"; }

# the StorageClass a Controller or MariaDB volume names (empty: the default one); kept when present
storage_class() {
    if [ -n "$1" ]; then
        if kubectl get storageclass "$1" >/dev/null 2>&1; then echo "   StorageClass $1 exists: kept"; return; fi
        name=$1 default=false
    else
        if kubectl get storageclass -o jsonpath='{range .items[*]}{.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}{"\n"}{end}' \
            | grep -qx true; then
            echo "   a default StorageClass exists: kept"; return
        fi
        name=gp3 default=true
    fi
    kubectl apply --server-side --field-manager=slinkyml-install -f - <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $name
  annotations:
    storageclass.kubernetes.io/is-default-class: "$default"
provisioner: ebs.csi.aws.com
parameters:
  type: gp3
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
EOF
}

# the files of rendered/ (NN-KIND-NAME.yaml) whose objects the slurm chart does not make: the Token, the
# Karpenter, storage and MariaDB objects; the chart makes the Slinky objects and their ConfigMap and sssd Secret
not_from_chart() {
    for file in rendered/*.yaml; do
        kind=${file#rendered/*-}
        kind=${kind%%-*}
        case $kind:$file in
            controller:* | nodeset:* | loginset:* | restapi:* | accounting:*) ;;
            configmap:*-slurm-config.yaml | secret:*-sssd-conf.yaml) ;;
            *) echo "$file" ;;
        esac
    done
}

objects() {  # objects NAMESPACE CHART
    if [ "$route" = kubectl ]; then
        kubectl apply --server-side --field-manager=slinkyml-install -f rendered/
        return
    fi
    for file in $(not_from_chart); do
        kubectl apply --server-side --field-manager=slinkyml-install -f "$file"
    done
    if [ "$target" = dev-kube ]; then
        slurm_chart "$1" "$CHARTS/slurm" --wait=false
    else
        # shellcheck disable=SC2086  # CHART is the chart's reference and its --version, two words
        slurm_chart "$1" $2
    fi
}

# slurm_chart NAMESPACE CHART [HELM-ARGS...]: the slurm chart with our values. The operator's webhook looks
# up a Controller's ConfigMaps in its informer cache, where one this install has just created may not be
# yet ("ConfigMap ... not found", seen on a loaded machine): a refused install is tried once more after
# 10 s (upgrade --install is idempotent).
slurm_chart() {
    namespace=$1
    shift
    helm upgrade --install slurm "$@" --namespace "$namespace" -f helm/values.yaml && return 0
    echo "   the slurm chart was refused; once more in 10 s"
    sleep 10
    helm upgrade --install slurm "$@" --namespace "$namespace" -f helm/values.yaml
}

# TARGET=eks: the command as INSTALL.md shows it, its known placeholders filled from the environment
run_eks() {  # run_eks NUMBER COMMAND
    cmd=$2
    case $cmd in
        *'<your private subnet ids>'*)
            if [ -z "${SUBNET_IDS:-}" ] || [ -z "${NODE_SECURITY_GROUP:-}" ]; then
                die "step $1 needs SUBNET_IDS (the private subnets' ids) and NODE_SECURITY_GROUP (the node" \
                    "security group's id) to tag for Karpenter's discovery"
            fi
            cmd=$(printf '%s\n' "$cmd" | sed -e "s|<your private subnet ids>|$SUBNET_IDS|" \
                -e "s|<the node security group id>|$NODE_SECURITY_GROUP|")
            ;;
    esac
    case $cmd in
        *'<a slinkyml source checkout>'*)
            [ -n "${SLINKYML_SOURCE:-}" ] || die "step $1 builds the training images: set SLINKYML_SOURCE to a" \
                "slinkyml source checkout (its containers/ and package are the build context)"
            cmd=$(printf '%s\n' "$cmd" | sed -e "s|<a slinkyml source checkout>|$SLINKYML_SOURCE|g")
            ;;
    esac
    case $cmd in
        *'<'*'>'*) die "step $1 has a placeholder to fill in by hand (INSTALL.md step $1): $cmd; then rerun with FROM=$(($1 + 1))" ;;
    esac
    sh -c "$cmd"
}

number=0
while [ "$#" -gt 0 ]; do
    kind=$1 title=$2 cmd=$3 devkube=$4
    shift 4
    number=$((number + 1))
    [ "$number" -ge "$from" ] || continue
    echo "== $number. $title ($target, $route)"
    value=${kind#*=}
    case $target:$kind in
        eks:storageclass=*)
            run_eks "$number" "$cmd"
            storage_class "$value"
            ;;
        eks:secrets) sh secrets.sh ;;
        eks:objects=*) objects "$value" "$cmd" ;;
        eks:operator | eks:operator-crds)
            # the kubectl route installs the same charts: the CRDs and the operator are charts either way
            run_eks "$number" "$cmd"
            ;;
        eks:*) run_eks "$number" "$cmd" ;;
        dev-kube:operator-crds)
            if [ "$route" = helm ]; then
                # the plane installed the same CRDs itself: the chart takes them over
                helm upgrade --install slurm-operator-crds "$CHARTS/slurm-operator-crds" --take-ownership
            fi
            established controllers.slinky.slurm.net nodesets.slinky.slurm.net loginsets.slinky.slurm.net \
                restapis.slinky.slurm.net accountings.slinky.slurm.net tokens.slinky.slurm.net
            echo "   $devkube"
            ;;
        dev-kube:operator)
            kubectl get validatingwebhookconfiguration slinkyml-dev-slurm-operator-validating >/dev/null \
                || die "the slurm-operator's webhook is not registered: slinkyml dev kube up (without --no-operator)"
            if [ "$route" = helm ]; then
                # the chart's alternative to cert-manager; its webhook off: no node runs the chart's pods, and a
                # webhook naming their Service would refuse every Slinky object (the plane's own judges them)
                helm upgrade --install slurm-operator "$CHARTS/slurm-operator" --namespace slinky --create-namespace \
                    --set crds.enabled=false --set certManager.enabled=false --set webhook.enabled=false
            fi
            echo "   $devkube"
            ;;
        dev-kube:karpenter)
            established nodepools.karpenter.sh ec2nodeclasses.karpenter.k8s.aws
            skip "$devkube"
            ;;
        dev-kube:mariadb-operator)
            established mariadbs.k8s.mariadb.com
            skip "$devkube"
            ;;
        dev-kube:storageclass=*)
            echo "   $devkube"
            storage_class "$value"
            ;;
        dev-kube:secrets) sh secrets.sh ;;
        dev-kube:objects=*) objects "$value" "$cmd" ;;
        dev-kube:*) skip "$devkube" ;;
    esac
done
echo "install.sh: $number steps done ($target, $route)"

"""The local Kubernetes cluster: the control plane (``kube``), its PKI, the kubelet node and its network
namespace, Helm, and Slurm in the operator's pods (``operator_cluster``). The top of dev/'s three rooms."""

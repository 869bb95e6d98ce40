"""FSx for Lustre: a PERSISTENT_2 StorageClass (aws-fsx-csi-driver) and one RWX claim.

The CSI driver cannot create PERSISTENT_2's S3 link, so the data-repository association is rendered
as ``aws fsx create-data-repository-association`` input, to run once the claim is bound.
"""

from __future__ import annotations

from typing import Any

from slinkyml.cluster import names
from slinkyml.cluster.spec import SlurmCluster


def fsx_volume(c: SlurmCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container volume mounts) for the FSx claim; empty when storage is off."""
    if not c.storage.enabled:
        return [], []
    vol = [{"name": "fsx", "persistentVolumeClaim": {"claimName": names.fsx_pvc(c)}}]
    mount = [{"name": "fsx", "mountPath": c.storage.mount_path}]
    return vol, mount


def render_storage_class(c: SlurmCluster) -> dict[str, Any]:
    s = c.storage
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": names.fsx_storage_class(c), "labels": names.labels(c, "storage")},
        "provisioner": "fsx.csi.aws.com",
        "parameters": {
            "subnetId": s.subnet_id,
            "securityGroupIds": ",".join(s.security_group_ids),
            "deploymentType": "PERSISTENT_2",
            "perUnitStorageThroughput": str(s.throughput_per_tib),
            "fileSystemTypeVersion": "2.15",
            "dataCompressionType": "LZ4",
        },
        "mountOptions": ["flock"],
        # Retain: deleting the cluster must never delete datasets and checkpoints.
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": True,
    }


def render_pvc(c: SlurmCluster) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": names.fsx_pvc(c), "namespace": c.namespace, "labels": names.labels(c, "storage")},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": names.fsx_storage_class(c),
            "resources": {"requests": {"storage": f"{c.storage.capacity_gib}Gi"}},
        },
    }


def render_fsx(c: SlurmCluster) -> list[dict[str, Any]]:
    if not c.storage.enabled:
        return []
    return [render_storage_class(c), render_pvc(c)]


def data_repository_association(c: SlurmCluster) -> dict[str, Any] | None:
    s = c.storage
    if not s.enabled or not s.s3_bucket:
        return None
    events = ["NEW", "CHANGED", "DELETED"]
    return {
        "FileSystemId": "<volumeHandle of the PV bound to "
                        f"{c.namespace}/{names.fsx_pvc(c)}>",
        "FileSystemPath": s.s3_file_system_path,
        "DataRepositoryPath": s.s3_bucket,
        "BatchImportMetaDataOnCreate": True,
        "S3": {"AutoImportPolicy": {"Events": events}, "AutoExportPolicy": {"Events": events}},
        "Tags": [{"Key": names.LABEL_CLUSTER, "Value": c.name}],
    }

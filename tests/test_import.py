"""`slinkyml import`: Kubeflow PyTorchJob/MPIJob/TrainJob and Volcano Job manifests → job specs.

The fixtures under tests/data/import are checked against the upstream API shapes first: the
Training Operator's generated models (kubeflow-training: PyTorchJob and MPIJob v1, with the
Kubernetes client's PodTemplateSpec), Kubeflow Trainer's (kubeflow-trainer-api: TrainJob), and for
mpi-operator v2beta1 and Volcano, whose Go types ship in no Python package, the field tables below
transcribed from their types.go (the nested ReplicaSpec/RunPolicy/PodTemplateSpec use the
generated models). Every key must be a field of its type and every value of the field's type.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import typing
from pathlib import Path

import pytest
import yaml

from slinkyml.jobs import import_manifest
from slinkyml.jobs.importer import ImportOptions, ManifestError, pyxis_image
from slinkyml.jobs.render import render_sbatch
from slinkyml.jobs.spec import JobSpec

DATA = Path(__file__).parent / "data" / "import"
FIXTURES = sorted(p.name for p in DATA.glob("*.yaml") if not p.name.endswith(".expected.yaml"))
REGENERATE = "SLINKYML_REGENERATE" in __import__("os").environ

kubeflow_models = pytest.importorskip("kubeflow.training.models", reason="pip install '.[dev]' (kubeflow-training)")
trainer_models = pytest.importorskip("kubeflow_trainer_api.models",
                                     reason="pip install '.[dev]' (kubeflow-trainer-api)")
k8s_models = pytest.importorskip("kubernetes.client.models", reason="pip install '.[dev]' (kubernetes)")


# -- upstream shapes -------------------------------------------------------------------------------
#: mpi-operator pkg/apis/kubeflow/v2beta1/types.go, MPIJobSpec (json tags), newest fields included.
MPIJOB_V2BETA1_SPEC = {"slotsPerWorker": "int", "runPolicy": "KubeflowOrgV1RunPolicy",
                       "mpiReplicaSpecs": "dict(str, KubeflowOrgV1ReplicaSpec)", "sshAuthMountPath": "str",
                       "launcherCreationPolicy": "str", "mpiImplementation": "str", "runLauncherAsWorker": "bool"}
#: volcano-sh/apis pkg/apis/batch/v1alpha1/job.go: JobSpec, TaskSpec, LifecyclePolicy, VolumeSpec.
VOLCANO_JOB_SPEC = {"schedulerName": "str", "minAvailable": "int", "volumes": "list[VolcanoVolumeSpec]",
                    "tasks": "list[VolcanoTaskSpec]", "policies": "list[VolcanoLifecyclePolicy]",
                    "plugins": "dict(str, list[str])", "runningEstimate": "str", "queue": "str", "maxRetry": "int",
                    "ttlSecondsAfterFinished": "int", "priorityClassName": "str", "minSuccess": "int",
                    "networkTopology": "object"}
VOLCANO_TYPES = {
    "VolcanoTaskSpec": {"name": "str", "replicas": "int", "minAvailable": "int", "template": "V1PodTemplateSpec",
                        "policies": "list[VolcanoLifecyclePolicy]", "topologyPolicy": "str", "maxRetry": "int",
                        "dependsOn": "object", "partitionPolicy": "object"},
    "VolcanoLifecyclePolicy": {"action": "str", "event": "str", "events": "list[str]", "exitCode": "int",
                               "timeout": "str"},
    "VolcanoVolumeSpec": {"mountPath": "str", "volumeClaimName": "str", "volumeClaim": "V1PersistentVolumeClaimSpec"},
}
TRANSCRIBED_SPECS = {("kubeflow.org/v2beta1", "MPIJob"): ("MPIJobSpec (v2beta1)", MPIJOB_V2BETA1_SPEC),
                     ("batch.volcano.sh/v1alpha1", "Job"): ("Volcano JobSpec", VOLCANO_JOB_SPEC)}
_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def _openapi_fields(type_name: str) -> dict[str, str]:
    """JSON key → type string of a generated model (Training Operator or Kubernetes client)."""
    if type_name in VOLCANO_TYPES:
        return VOLCANO_TYPES[type_name]
    model = getattr(kubeflow_models, type_name, None) or getattr(k8s_models, type_name)
    return {model.attribute_map[attr]: kind for attr, kind in model.openapi_types.items()}


def _container_type(type_name: str) -> tuple[str, str] | None:
    """``list[X]``/``List[X]`` → ("list", X); ``dict(str, X)``/``Dict[str, X]`` → ("dict", X)
    (the two spellings of the OpenAPI generator's Python clients)."""
    for prefix in ("list[", "List["):
        if type_name.startswith(prefix) and type_name.endswith("]"):
            return "list", type_name[len(prefix):-1]
    for prefix, end in (("dict(", ")"), ("Dict[", "]")):
        if type_name.startswith(prefix) and type_name.endswith(end):
            return "dict", type_name[len(prefix):-1].split(", ", 1)[1]
    return None


def _check_openapi(value, type_name: str, path: str, errors: list[str]) -> None:
    container = _container_type(type_name)
    if container is not None:
        kind, inner = container
        if not isinstance(value, list if kind == "list" else dict):
            errors.append(f"{path}: expected a {kind}")
            return
        if kind == "dict" and path.rsplit(".", 1)[-1] in ("limits", "requests"):
            inner = "Quantity"  # the client types them as str; the API takes int-or-string quantities
        items = enumerate(value) if kind == "list" else value.items()
        for key, item in items:
            _check_openapi(item, inner, f"{path}[{key}]" if kind == "list" else _join(path, key), errors)
    elif type_name == "Quantity":
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.append(f"{path}: not a quantity")
    elif type_name in _PRIMITIVES:
        expected = _PRIMITIVES[type_name]
        if type_name == "str" and isinstance(value, (int, float)) and not isinstance(value, bool):
            errors.append(f"{path}: expected a string, got {value!r}")
        elif not isinstance(value, expected) or (type_name == "int" and isinstance(value, bool)):
            errors.append(f"{path}: expected {type_name}, got {value!r}")
    else:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a {type_name} mapping")
            return
        fields = _openapi_fields(type_name)
        for key, item in value.items():
            if key not in fields:
                errors.append(f"{_join(path, key)}: not a field of {type_name}")
            else:
                _check_openapi(item, fields[key], _join(path, key), errors)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_pydantic(value, annotation, path: str, errors: list[str]) -> None:
    """Unknown keys anywhere in a Kubeflow Trainer model tree (types: the models' own from_dict)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and isinstance(value, list):
        for i, item in enumerate(value):
            _check_pydantic(item, args[0], f"{path}[{i}]", errors)
    elif origin is dict and isinstance(value, dict):
        for key, item in value.items():
            _check_pydantic(item, args[1], f"{path}.{key}", errors)
    elif args:  # Optional / Union / Annotated
        for arg in args:
            _check_pydantic(value, arg, path, errors)
    elif isinstance(annotation, type) and hasattr(annotation, "model_fields") and isinstance(value, dict):
        fields = {(f.alias or name): f.annotation for name, f in annotation.model_fields.items()}
        for key, item in value.items():
            if key not in fields:
                errors.append(f"{path}.{key}: not a field of {annotation.__name__}")
            else:
                _check_pydantic(item, fields[key], f"{path}.{key}", errors)


def upstream_errors(manifest: dict) -> list[str]:
    errors: list[str] = []
    kind = (manifest["apiVersion"], manifest["kind"])
    if kind == ("kubeflow.org/v1", "PyTorchJob"):
        _check_openapi(manifest, "KubeflowOrgV1PyTorchJob", "", errors)
    elif kind == ("kubeflow.org/v1", "MPIJob"):
        _check_openapi(manifest, "KubeflowOrgV1MPIJob", "", errors)
    elif kind == ("trainer.kubeflow.org/v1alpha1", "TrainJob"):
        trainer_models.TrainerV1alpha1TrainJob.from_dict(manifest)  # raises on wrong types
        _check_pydantic(manifest, trainer_models.TrainerV1alpha1TrainJob, "", errors)
    elif kind in TRANSCRIBED_SPECS:
        title, fields = TRANSCRIBED_SPECS[kind]
        _check_openapi(manifest["metadata"], "V1ObjectMeta", "metadata", errors)
        for key, item in manifest["spec"].items():
            if key not in fields:
                errors.append(f"spec.{key}: not a field of {title}")
            else:
                _check_openapi(item, fields[key], f"spec.{key}", errors)
    else:
        errors.append(f"unexpected kind {kind}")
    return errors


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_has_the_upstream_shape(name):
    manifest = yaml.safe_load((DATA / name).read_text())
    assert upstream_errors(manifest) == []


def test_the_shape_check_catches_a_wrong_field():
    manifest = yaml.safe_load((DATA / "pytorchjob-cpu.yaml").read_text())
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    manifest["spec"]["runPolicy"] = {"backoffLimit": "3"}
    errors = upstream_errors(manifest)
    assert any(e.endswith(".containers[0].comand: not a field of V1Container") for e in errors)
    assert any(e.startswith("spec.runPolicy.backoffLimit: expected int") for e in errors)
    volcano = yaml.safe_load((DATA / "volcano-pytorch.yaml").read_text())
    volcano["spec"]["tasks"][0]["replica"] = 1
    assert upstream_errors(volcano) == ["spec.tasks[0].replica: not a field of VolcanoTaskSpec"]


# -- golden outputs --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_import_matches_golden_and_renders_unchanged(name, tmp_path):
    result = import_manifest(DATA / name, name=None)
    text = result.to_yaml().replace(str(DATA / name), f"tests/data/import/{name}")
    golden = DATA / name.replace(".yaml", ".expected.yaml")
    if REGENERATE:
        golden.write_text(text)
    assert text == golden.read_text()
    # what sbatch render|submit read is exactly this file
    spec = JobSpec.from_yaml(golden)
    assert spec == result.spec
    script = render_sbatch(spec)
    assert f"#SBATCH --nodes={spec.nodes}" in script


def _imported(name: str, **options) -> dict:
    return import_manifest(DATA / name, ImportOptions(**options)).data


def test_pytorchjob_mapping():
    result = import_manifest(DATA / "pytorchjob-gpu.yaml", ImportOptions(claim_paths={"fsx-claim": "/fsx"}))
    data = result.data
    assert data["nodes"] == 4  # Master + 3 Workers, one pod per node
    assert (data["gpus_per_node"], data["procs_per_node"], data["network"]) == (8, 8, "efa")
    assert (data["cpus_per_task"], data["mem_per_node"]) == (96, f"{1000 * 1024}M")  # limits win over requests
    assert data["time_limit"] == "1-00:00:00" and data["requeue"] == {"max_restarts": 4}
    assert data["container"] == {"image": "nvcr.io#nvidia/pytorch:24.07-py3", "mounts": ["/fsx:/fsx", "tmpfs:/dev/shm"],
                                 "workdir": "/fsx/code"}
    assert data["entry"] == {"script": "train.py", "args": ["--model=llama-3-8b", "--epochs=3"]}
    assert data["env"] == {"NCCL_DEBUG": "INFO"}  # HF_TOKEN comes from a Secret: warned, not copied
    warned = {w.path for w in result.warnings}
    assert data["instance_type"] == "p5.48xlarge"  # the nodeSelector's instance type is mapped, not dropped
    for field in ("spec.pytorchReplicaSpecs.Master.template.spec.tolerations",
                  "spec.pytorchReplicaSpecs.Worker.template.spec.tolerations",
                  "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[1].valueFrom",
                  "spec.pytorchReplicaSpecs.Master.template.spec.volumes[2].secret",
                  "spec.runPolicy.schedulingPolicy.queue"):
        assert field in warned
    assert "hf-token" not in result.to_yaml().split("# not mapped")[-1].split("\n", 1)[1]


def test_plain_python_pods_run_one_process_per_node():
    data = _imported("pytorchjob-cpu.yaml")
    assert (data["nodes"], data["launcher"], data["procs_per_node"]) == (2, "torchrun", 1)
    assert data["python"] if "python" in data else True
    assert data["container"]["image"] == "kubeflowkatib/pytorch-mnist:v1beta1-45c5727"  # docker.io is enroot's default


def test_mpijob_v2beta1_mapping():
    data = _imported("mpijob-v2beta1.yaml")
    assert data["nodes"] == 2  # the Launcher is not a node
    assert (data["launcher"], data["srun_args"], data["tasks_per_node"]) == ("srun", ["--mpi=pmix"], 1)
    assert data["env"] == {"NCCL_DEBUG": "INFO", "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "^openib"}
    assert data["entry"]["script"] == "scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py"
    assert data["gpus_per_node"] == 1 and data["requeue"] == {"max_restarts": 2}


@pytest.mark.parametrize(("instance", "devices", "ranks"), [("trn1.32xlarge", 16, 32), ("trn2.48xlarge", 16, 64),
                                                          (None, 64, 128)])
def test_neuroncores_follow_the_instance_type(instance, devices, ranks):
    manifest = _manifest("pytorchjob-cpu.yaml")
    for role in ("Master", "Worker"):
        pod = manifest["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        cores = 32 if instance == "trn1.32xlarge" else 128
        pod["containers"][0]["resources"] = {"limits": {"aws.amazon.com/neuroncore": cores}}
        pod["containers"][0]["command"] = ["torchrun", "--nproc_per_node=auto", "train.py"]
        if instance:
            pod["nodeSelector"] = {"node.kubernetes.io/instance-type": instance}
    result = import_manifest(manifest)
    spec = result.spec
    assert (spec.launcher, spec.neuron_devices_per_node, spec.effective_procs_per_node) == ("neuron", devices, ranks)
    assert spec.instance_type == instance
    assert any("read as trn1 devices" in n for n in result.notes) == (instance is None)


def test_mpijob_v1_slots_become_tasks():
    data = _imported("mpijob-v1.yaml")
    assert (data["nodes"], data["tasks_per_node"], data["cpus_per_task"]) == (2, 4, 2)  # 8 CPUs over 4 slots


def test_trainjob_mapping():
    data = _imported("trainjob.yaml")
    assert (data["nodes"], data["gpus_per_node"], data["procs_per_node"], data["time_limit"]) == (2, 4, 4, "01:30:00")
    assert data["entry"] == {"module": "recipes.full_finetune_distributed", "args": ["--config", "/workspace/config.yaml"]}


def test_volcano_tasks_are_summed_and_queue_mapped():
    data = _imported("volcano-pytorch.yaml", queue_map={"research": "account:physics"})
    assert (data["nodes"], data["account"], data["time_limit"]) == (3, "physics", "00:30:00")
    assert data["requeue"] == {"max_restarts": 5} and "partition" not in data
    assert _imported("volcano-pytorch.yaml", queue_map={"research": "gpu"})["partition"] == "gpu"


def test_volcano_mpi_launcher_task_is_not_a_node():
    result = import_manifest(DATA / "volcano-mpi.yaml")
    assert (result.data["nodes"], result.data["launcher"]) == (2, "srun")
    assert result.data["entry"] == {"script": "mpi_hello_world", "args": []}
    assert any("only its `mpiexec` line is imported" in n for n in result.notes)


def _manifest(name: str) -> dict:
    return yaml.safe_load((DATA / name).read_text())


@pytest.mark.parametrize(("name", "edit", "message"), [
    ("volcano-pytorch.yaml", lambda m: m["spec"].update(minAvailable=1),
     "spec.minAvailable: 1 of 3 pods: an elastic gang has no Slurm equivalent"),
    ("pytorchjob-gpu.yaml", lambda m: m["spec"]["runPolicy"]["schedulingPolicy"].update(minAvailable=2),
     "spec.runPolicy.schedulingPolicy.minAvailable: 2 of 4 pods"),
    ("pytorchjob-cpu.yaml", lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
     .pop("command"), "containers[0].command: not set"),
    ("mpijob-v2beta1.yaml", lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
     ["resources"]["limits"].update(cpu="lots"), "resources.limits.cpu: not a resource quantity: 'lots'"),
    ("pytorchjob-cpu.yaml", lambda m: m["spec"]["pytorchReplicaSpecs"].update(Chief={"replicas": 1}),
     "spec.pytorchReplicaSpecs.Chief: unknown replica type"),
    ("trainjob.yaml", lambda m: m["spec"]["trainer"].update(numNodes="two"), "spec.trainer.numNodes: must be an integer"),
])
def test_unmappable_manifests_fail_in_one_line(name, edit, message):
    manifest = _manifest(name)
    edit(manifest)
    with pytest.raises(ManifestError) as info:
        import_manifest(manifest)
    assert message in info.value.one_line() and "\n" not in str(info.value)


def test_strict_makes_every_warning_an_error():
    with pytest.raises(ManifestError, match=r"--strict: \d+ field\(s\) cannot be mapped: .*tolerations"):
        import_manifest(DATA / "pytorchjob-gpu.yaml", ImportOptions(strict=True))
    assert import_manifest(DATA / "trainjob.yaml", ImportOptions(strict=True)).warnings == ()


def test_sidecars_init_containers_and_empty_dirs_are_warned():
    manifest = _manifest("pytorchjob-cpu.yaml")
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    pod["containers"].insert(0, {"name": "proxy", "image": "envoy"})
    pod["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    pod["containers"][1]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    result = import_manifest(manifest)
    assert result.data["container"]["image"] == "kubeflowkatib/pytorch-mnist:v1beta1-45c5727"  # the `pytorch` one
    paths = {w.path for w in result.warnings}
    assert {"spec.pytorchReplicaSpecs.Master.template.spec.initContainers",
            "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]",
            "spec.pytorchReplicaSpecs.Master.template.spec.volumes[0].emptyDir"} <= paths
    assert "spec.pytorchReplicaSpecs" not in paths  # both still run the `pytorch` container's program


@pytest.mark.parametrize(("image", "pyxis"), [
    ("nvcr.io/nvidia/pytorch:24.07-py3", "nvcr.io#nvidia/pytorch:24.07-py3"),
    ("docker.io/library/ubuntu:24.04", "library/ubuntu:24.04"),
    ("pytorch/pytorch:2.3.0-cuda12.1", "pytorch/pytorch:2.3.0-cuda12.1"),
    ("localhost:5000/train:v1", "localhost:5000#train:v1"),
    ("ubuntu", "ubuntu"),
])
def test_pyxis_image_names(image, pyxis):
    assert pyxis_image(image) == pyxis


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_writes_the_spec_and_lists_warnings(cli, tmp_path):
    out = tmp_path / "job.yaml"
    code, stdout, stderr = cli("import", str(DATA / "pytorchjob-gpu.yaml"), "-o", str(out),
                               "--claim-path", "fsx-claim=/fsx", "--queue-map", "gpu-high=partition:p5")
    assert code == 0 and stdout == ""
    spec = JobSpec.from_yaml(out)
    assert spec.partition == "p5" and spec.container.mounts[0] == "/fsx:/fsx"
    lines = stderr.splitlines()
    assert lines and all(line.startswith("slinkyml: ") for line in lines)
    assert sum("warning:" in line and "(not mapped)" in line for line in lines) == 5
    code, _, _ = cli("sbatch", "render", str(out))
    assert code == 0


@pytest.mark.parametrize(("content", "message"), [
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "no supported training job (found: v1 Pod"),
    ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nspec: [\n  a: 1: 2\n", ":4: not valid YAML"),
    (b"\xff\xfe garbage", "not UTF-8 text"),
])
def test_cli_bad_files_exit_1_in_one_line(cli, tmp_path, content, message):
    path = tmp_path / "m.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, stdout, stderr = cli("import", str(path))
    assert (code, stdout) == (1, "")
    assert stderr.count("\n") == 1 and message in stderr and "Traceback" not in stderr


def test_cli_several_jobs_and_usage_errors(cli, tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text((DATA / "pytorchjob-cpu.yaml").read_text() + "---\n" + (DATA / "trainjob.yaml").read_text())
    code, _, stderr = cli("import", str(both))
    assert code == 1 and "holds 2 jobs (pytorch-simple, fine-tune-qwen); pick one with --name" in stderr
    code, stdout, _ = cli("import", str(both), "--name", "fine-tune-qwen")
    assert code == 0 and "name: fine-tune-qwen" in stdout
    code, _, stderr = cli("import", str(both), "--queue-map", "nothing")
    assert code == 2 and "expected NAME=VALUE" in stderr
    code, _, stderr = cli("import", str(tmp_path / "missing.yaml"))
    assert code == 1 and "cannot read" in stderr


# -- live: an imported CPU PyTorchJob trains on the local cluster ------------------------------------
@pytest.mark.slurm
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (pip install '.[train]')")
@pytest.mark.timeout(300)
def test_imported_pytorchjob_trains_on_the_local_cluster(slurm):
    from slinkyml.jobs.follow import wait
    from slinkyml.jobs.submit import SbatchBackend, submit
    from slinkyml.train import FINAL_FILE

    work = Path(tempfile.mkdtemp(prefix="slinkyml-import-", dir="/tmp"))
    work.chmod(0o777)
    try:
        manifest = _manifest("pytorchjob-cpu.yaml")
        for role in ("Master", "Worker"):
            container = manifest["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]
            container["command"] = [sys.executable, "-m", "slinkyml.train", "--steps", "6", "--checkpoint-every", "3",
                                    "--checkpoint-dir", str(work / "ckpt")]
            container["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
        manifest["spec"]["runPolicy"] = {"activeDeadlineSeconds": 600, "backoffLimit": 1}
        result = import_manifest(manifest, ImportOptions(container=False))
        spec = result.spec.replace(log_dir=str(work / "logs"))
        assert (spec.nodes, spec.launcher, spec.container) == (2, "torchrun", None)
        job_id = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=work).job_id
        try:
            state = wait(slurm, job_id, timeout=240, poll=1.0)
        finally:
            slurm.run("scancel", [str(job_id)], check=False, retries=0)
        logs = "\n".join(p.read_text(errors="replace") for p in sorted((work / "logs").glob("*")) if p.is_file())
        assert state.state == "COMPLETED", logs[-3000:]
        final = json.loads((work / "ckpt" / FINAL_FILE).read_text())
        assert final["steps"] == 6 and final["world_size"] == 2 and final["allreduce"]["ok"]
    finally:
        shutil.rmtree(work, ignore_errors=True)

"""Network presets: versions read on the node at job start, declared versions as fallback, device RDMA
only on RDMA-capable instance types; the rendered bash and the Python path agree.

The batch-node detection runs for real in bash: ``fi_info`` is a stand-in printing what libfabric's
util/info.c prints for ``--version``, and the plugin is a file holding the "aws-ofi-nccl X.Y.Z" string
the real library carries (its init log line), under a prefix named by SLINKYML_OFI_NCCL_DIR.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slinkyml.errors import SpecError
from slinkyml.jobs.presets import (
    load_presets,
    network_env,
    preset_env_lines,
    spec_preset_env,
    version_below,
)
from slinkyml.jobs.render import render_sbatch
from slinkyml.jobs.spec import JobSpec


def _spec(**over) -> JobSpec:
    data = {"name": "net", "entry": {"module": "slinkyml.train"}, "network": "efa", "gpus_per_node": 8}
    data.update(over)
    return JobSpec.from_dict(data)


def _node(tmp_path: Path, *, libfabric: str | None, plugin: str | None, multiarch: bool = True) -> dict[str, str]:
    """A node's installed EFA stack: fi_info on PATH, the plugin library under a prefix."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if libfabric is not None:
        fi_info = bin_dir / "fi_info"
        fi_info.write_text("#!/bin/sh\n[ \"$1\" = --version ] || exit 1\n"
                           f"printf 'fi_info: {libfabric}\\nlibfabric: {libfabric}\\nlibfabric api: 2.1\\n'\n")
        fi_info.chmod(0o755)
    prefix = tmp_path / "ofi-nccl"
    lib = prefix / "lib" / ("x86_64-linux-gnu" if multiarch else "")
    lib.mkdir(parents=True)
    if plugin is not None:
        (lib / "libnccl-net-ofi.so").write_bytes(b"\x7fELF\x00junk\x00Initializing aws-ofi-nccl "
                                                 + plugin.encode() + b"\x00more")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLINKYML_OFI_NCCL_DIR": str(prefix)}


def _run_preset(spec: JobSpec, env: dict[str, str]) -> dict[str, str]:
    script = "set -euo pipefail\n" + "\n".join(preset_env_lines(spec)) + "\nenv -0 > \"$1\"\n"
    dump = Path(env["SLINKYML_OFI_NCCL_DIR"]).parent / "env.dump"
    proc = subprocess.run(["bash", "-c", script, "_", str(dump)], env=env, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().startswith("slinkyml: network efa: libfabric ") == (spec.container is None)
    out = dict(item.split("=", 1) for item in dump.read_bytes().decode().split("\0") if "=" in item)
    return {k: v for k, v in out.items() if k.startswith(("NCCL_", "FI_", "OMP_", "NEURON_", "MALLOC_"))}


def test_current_stack_selects_the_plugin_loudly_and_no_legacy_workaround(tmp_path):
    got = _run_preset(_spec(instance_type="p5.48xlarge"),
                      _node(tmp_path, libfabric="2.6.0amzn1.0", plugin="1.21.1"))
    assert got == {"NCCL_NET": "AWS Libfabric", "NCCL_SOCKET_IFNAME": "^lo,docker,veth", "NCCL_DEBUG": "WARN"}


def test_old_plugin_on_p4d_gets_every_documented_workaround(tmp_path):
    got = _run_preset(_spec(instance_type="p4d.24xlarge"),
                      _node(tmp_path, libfabric="1.16.1", plugin="1.5.0", multiarch=False))
    assert got["NCCL_NET"] == "AWS Libfabric" and got["FI_PROVIDER"] == "efa"
    assert got["NCCL_PROTO"] == "simple" and got["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "FI_EFA_FORK_SAFE" not in got


def test_device_rdma_is_never_forced_on_g5(tmp_path):
    spec = _spec(instance_type="g5.48xlarge")
    got = _run_preset(spec, _node(tmp_path, libfabric="1.16.1", plugin="1.6.0"))
    assert "FI_EFA_USE_DEVICE_RDMA" not in got and "FI_PROVIDER" not in got
    assert "FI_EFA_USE_DEVICE_RDMA" not in render_sbatch(spec)
    # no instance type: unknown device, so never forced either
    assert "FI_EFA_USE_DEVICE_RDMA" not in network_env("efa", {"libfabric": "1.16.1"})


def test_plugin_1_6_on_p5_with_current_libfabric_still_needs_device_rdma(tmp_path):
    got = _run_preset(_spec(instance_type="p5.48xlarge"), _node(tmp_path, libfabric="1.22.0", plugin="1.6.0"))
    assert got["FI_EFA_USE_DEVICE_RDMA"] == "1" and "FI_PROVIDER" not in got


def test_unreadable_node_falls_back_to_declared_then_image_versions(tmp_path):
    nothing = _node(tmp_path, libfabric=None, plugin=None)
    declared = _run_preset(_spec(instance_type="p4d.24xlarge", library_versions={"aws-ofi-nccl": "1.6.2"}),
                           nothing)
    assert declared["FI_EFA_USE_DEVICE_RDMA"] == "1" and "FI_PROVIDER" not in declared
    image = _run_preset(_spec(instance_type="p4d.24xlarge"), nothing)
    assert "FI_EFA_USE_DEVICE_RDMA" not in image and image["NCCL_NET"] == "AWS Libfabric"


def test_detected_versions_win_over_declared(tmp_path):
    got = _run_preset(_spec(instance_type="p4d.24xlarge", library_versions={"aws-ofi-nccl": "1.5.0"}),
                      _node(tmp_path, libfabric="2.1.0", plugin="1.16.3"))
    assert "FI_PROVIDER" not in got and "NCCL_PROTO" not in got


def test_container_jobs_use_declared_versions_without_reading_the_batch_node(tmp_path):
    spec = _spec(instance_type="p4d.24xlarge", library_versions={"aws-ofi-nccl": "1.5.0"},
                 container={"image": "nccl:1"})
    lines = preset_env_lines(spec)
    assert not any("fi_info" in line for line in lines)
    got = _run_preset(spec, _node(tmp_path, libfabric="2.6.0", plugin="1.21.1"))
    assert got["FI_PROVIDER"] == "efa" and got == {**spec_preset_env(spec)}


def test_spec_env_overrides_the_preset_once():
    spec = _spec(env={"NCCL_DEBUG": "INFO"}, container={"image": "x"})
    script = render_sbatch(spec)
    assert "export NCCL_DEBUG=INFO" in script and "NCCL_DEBUG=WARN" not in script


@pytest.mark.parametrize(("have", "bound", "below"), [
    ("1.5.0", "1.6.0", True), ("1.6.0", "1.6.0", False), ("1.13.0-aws", "1.13.0", False),
    ("1.12.1-aws", "1.13.0", True), ("2.1.0amzn5.0", "1.18.0", False), ("1.16.1", "1.18.0", True),
    ("1.9.0", "1.13.0", True), ("1.13", "1.13.0", True)])
def test_bash_and_python_version_comparison_agree(have, bound, below):
    from slinkyml.jobs.presets import VERSION_BELOW_FUNCTION

    proc = subprocess.run(["bash", "-c", f"{VERSION_BELOW_FUNCTION}\nslinkyml_version_below \"$1\" \"$2\"",
                           "_", have, bound], capture_output=True, env={"PATH": os.environ["PATH"]})
    if have == "1.13":  # sort -V: 1.13 < 1.13.0; Python pads nothing either
        assert (proc.returncode == 0) == below == version_below(have, bound)
        return
    assert (proc.returncode == 0) == below, (have, bound)
    assert version_below(have, bound) == below


def test_every_variable_carries_its_upstream_source():
    for name, preset in load_presets().items():
        entries = list((preset.get("env") or {}).items())
        for rule in preset.get("when") or ():
            entries += list(rule["env"].items())
        for key, entry in entries:
            assert entry["source"].strip(), (name, key)


def test_bad_declared_version_is_one_clear_error():
    with pytest.raises(SpecError, match="library_versions: not a version number"):
        render_sbatch(_spec(library_versions={"libfabric": "latest"}))


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_detection_runs_in_a_real_batch_script_on_two_nodes(slurm, shared_tmp, monkeypatch):
    """The rendered preset under sbatch (set -euo pipefail, Slurm's environment): the nodes have no
    libfabric, so the image defaults apply; a plugin 1.5.0 on the batch node's shared prefix switches
    the legacy variables on, and srun hands them to every task on both nodes."""
    from slinkyml.jobs.follow import wait
    from slinkyml.jobs.submit import SbatchBackend, submit

    dump = shared_tmp / "dump.sh"
    dump.write_text('#!/bin/sh\nenv | grep -E "^(NCCL|FI)_" | sort > "$OUT_DIR/$(hostname)-$SLURM_PROCID"\n')
    dump.chmod(0o755)

    def run(name: str) -> dict[str, str]:
        out = shared_tmp / name
        out.mkdir(mode=0o777)
        spec = _spec(name=name, nodes=2, gpus_per_node=0, launcher="srun", mem_per_node="256M", time_limit="2",
                     instance_type="p4d.24xlarge", entry={"script": str(dump)}, env={"OUT_DIR": str(out)},
                     log_dir=str(shared_tmp / "logs"))
        result = submit(spec, backend=SbatchBackend(slurm), slurm=slurm, cwd=shared_tmp)
        assert wait(slurm, result.job_id, timeout=90, poll=0.5).state == "COMPLETED"
        files = sorted(out.iterdir())
        assert len(files) == 2 and len({f.name.rsplit("-", 1)[0] for f in files}) == 2  # two nodes
        assert files[0].read_text() == files[1].read_text()
        return dict(line.split("=", 1) for line in files[0].read_text().splitlines())

    assert run("current") == {"NCCL_NET": "AWS Libfabric", "NCCL_SOCKET_IFNAME": "^lo,docker,veth",
                              "NCCL_DEBUG": "WARN"}
    _node(shared_tmp, libfabric=None, plugin="1.5.0")
    os.chmod(shared_tmp / "ofi-nccl", 0o755)
    monkeypatch.setenv("SLINKYML_OFI_NCCL_DIR", str(shared_tmp / "ofi-nccl"))  # sbatch --export=ALL
    old = run("old")
    assert old["NCCL_NET"] == "AWS Libfabric" and old["FI_PROVIDER"] == "efa" and old["NCCL_PROTO"] == "simple"
    assert old["FI_EFA_USE_DEVICE_RDMA"] == "1"

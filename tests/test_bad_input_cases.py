"""Every traceback and accepted-nonsense case issue 27's adversarial pass found: one line, the
documented exit code (1 failed, 2 usage/input, 3 Slurm unreachable), no traceback. Offline: each case
fails before Slurm is asked (or asks a slurmrestd that is not there)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLUSTER = str(REPO / "manifests" / "cpu-small" / "cluster.yaml")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 600 + "]" * 600 + "\n")
    (tmp_path / "deep-map.yaml").write_text("x:\n" + "".join("  " * (i + 1) + "k:\n" for i in range(600)))
    with open(tmp_path / "big.yaml", "w") as fh:  # 50 MB, refused unread: sparse, so no disk is spent
        fh.write("kind: PyTorchJob\n# ")
        fh.truncate(50 << 20)
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "list-kubeconfig.yaml").write_text("- a\n- b\n")
    (tmp_path / "bad-kubeconfig.yaml").write_text("a: [1\n")
    (tmp_path / "binary-kubeconfig.yaml").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "job.yaml").write_text("name: t\nlauncher: srun\nentry: {script: /bin/true}\n")
    (tmp_path / "existing").write_text("")
    return tmp_path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = [
    # (argv with {tmp}, exit code, a piece of the one line)
    (("import", "{tmp}/deep.yaml"), 1, "deep.yaml: not a manifest: nested too deeply"),
    (("import", "{tmp}/deep-map.yaml"), 1, "not a manifest: nested too deeply"),
    (("import", "{tmp}/big.yaml"), 1, "larger than 8 MiB, the import limit"),
    (("sbatch", "render", "{tmp}/big.yaml"), 2, "larger than 8 MiB, the limit for a spec"),
    (("usage", "--since", "99999999999d"), 2, "--since: '99999999999d' is outside 1970-01-01 .. 2262-01-01"),
    (("usage", "--since", "1000000d"), 2, "--since: '1000000d' is outside"),
    (("usage", "--until", "1960-01-01"), 2, "--until: '1960-01-01' is outside"),
    (("usage", "--by", ""), 2, "--by '': nothing to group by"),
    (("usage", "--by", "user,user"), 2, "a grouping given twice"),
    (("report", "--serve", "--port", "99999"), 2, "argument --port: '99999': a port is 0 to 65535"),
    (("report", "--serve", "--port", "-1"), 2, "argument --port: '-1': a port is 0 to 65535"),
    (("cluster", "render", CLUSTER, "-o", "/proc/x"), 2, "-o /proc/x: cannot write"),
    (("cluster", "render", CLUSTER, "-o", "{tmp}/existing"), 2, "is a file, not a folder"),
    (("cluster", "validate", "--kubernetes-version", "abc", CLUSTER), 2,
     "--kubernetes-version: 'abc' is not a version like 1.32"),
    (("cluster", "validate", "{tmp}/empty.yaml"), 2, "empty.yaml: nothing to validate"),
    (("cluster", "status", "--kubeconfig", "{tmp}/list-kubeconfig.yaml"), 2, "not a kubeconfig"),
    (("cluster", "status", "--kubeconfig", "{tmp}/bad-kubeconfig.yaml"), 2, "not a kubeconfig"),
    (("cluster", "status", "--kubeconfig", "{tmp}/binary-kubeconfig.yaml"), 2, "cannot load Kubernetes configuration"),
    (("sbatch", "submit", "--no-check", "--backend", "restapi", "--restapi-url", "http://[::1:6820", "{tmp}/job.yaml"), 2,
     "--restapi-url: 'http://[::1:6820': Invalid IPv6 URL"),
    (("sbatch", "submit", "--no-check", "--backend", "restapi", "--restapi-url", "http://127.0.0.1:99999",
      "{tmp}/job.yaml"), 2, "Port out of range"),
    (("sbatch", "submit", "--no-check", "--backend", "restapi", "--restapi-url", "http://127.0.0.1:{port}",
      "{tmp}/job.yaml"), 3, "cannot reach slurmrestd at http://127.0.0.1:"),
    (("run", "--no-check", "--dry-run", "--launcher", "srun", "-t", "1:99:99", "/bin/true"), 2,
     "time_limit: expected [D-]HH:MM:SS (hours 0-23 after a day, minutes and seconds 0-59)"),
    (("run", "--no-check", "--dry-run", "--launcher", "srun", "-t", "99999999999999", "/bin/true"), 2,
     "at most 4294967293 minutes"),
    (("run", "--no-check", "--dry-run", "--launcher", "srun", "--mem", "99999999999999999999T", "/bin/true"), 2,
     "mem_per_node: at most 9223372036854775805 MB"),
    (("fairshare", "--set-shares", "physics=-5"), 2, "is not a whole number of shares"),
    (("jobs", "cancel", "4294967752"), 2, "job ids are 1 to 4294967293"),
]


@pytest.mark.parametrize(("argv", "code", "needle"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_each_case_is_one_line_with_its_exit_code(cli, files, monkeypatch, argv, code, needle):
    monkeypatch.setenv("SLURM_JWT", "not-a-real-token")  # the TCP restapi cases reach the URL check
    port = _free_port()
    argv = tuple(a.replace("{tmp}", str(files)).replace("{port}", str(port)) for a in argv)
    got, out, err = cli(*argv)
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("slinkyml: error: "), err
    assert (got, needle in err) == (code, True), err

"""slinkyml: each rank's entry under DeepSpeed's slurm launcher (rendered; do not edit)."""
import os
import re
import runpy
import sys

env = os.environ
for name, source in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID"),
                     ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS"), ("NODE_RANK", "SLURM_NODEID")):
    if source in env:  # an srun task: srun's numbering is the truth
        env[name] = env[source]
EXPORTED = ("MLFLOW", "PYTHON", "MV2", "UCX", "NCCL", "CNCL", "HCCL", "BCCL", "ASCEND", "NEUWARE_HOME",
            "BIREN", "SUPA", "LD_LIBRARY", "PATH")
for name, value in list(env.items()):
    if (name.startswith(EXPORTED) and len(value) >= 2 and value[0] == value[-1] == '"'
            and re.search(r"[^\w@%+=:,./-]", value[1:-1])):
        env[name] = value[1:-1]
del sys.argv[0]
if sys.argv and sys.argv[0] == "-m":
    del sys.argv[0]
    sys.path[0] = os.getcwd()
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")

"""submitit's SlurmExecutor with its sbatch calls routed through :class:`slinkyml.slurm.Slurm`.

submitit writes the batch script and pickles the function (we keep both); only the submission
itself goes through our command layer, so it gets SLURM_CONF/TZ, typed one-line errors and the
same RPC accounting as every other Slurm call. Arrays are submitted here too (submitit's own
array path builds a fresh plain SlurmExecutor and a ``%A_%a`` log path per task).

Jobs are submitted through submitit's public ``Executor.submit``. What submitit has no public API
for, and this module therefore overrides or reads (checked against submitit 1.5.4; setup.cfg keeps
submitit below 1.6 so a release that changes them is caught by the tests first):

- ``_submit_command``: PicklingExecutor's documented hook for how a job reaches the cluster (here
  :meth:`Slurm.sbatch`);
- ``_make_submission_file_text``: the script text, to ``exec`` the task when there is no srun;
- ``_throttling``: submitit's 0.2 s sleep between submissions, set to 0;
- ``_num_tasks``, ``_submitit_command_str``, ``JobPaths.get_first_id_independent_folder`` and
  ``paths.move_temporary_file``: to submit one sbatch array of our chunked pickles, which
  submitit's ``map_array``/``batch`` cannot (they build a fresh plain executor and submit per task);
- ``submitit.core.utils.pickle_load`` (in executor.py): reading result pickles without a
  ``Job.result()`` call per rank (which would poll Slurm once per rank).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from submitit.core import core, utils
from submitit.helpers import DelayedSubmission
from submitit.slurm.slurm import SlurmExecutor, SlurmJob

from slinkyml.slurm import Slurm


class Backend(SlurmExecutor):
    """SlurmExecutor whose ``sbatch`` is :meth:`Slurm.sbatch`."""

    def __init__(self, folder: str | Path, *, slurm: Slurm, max_num_timeout: int = 3,
                 python: str | None = None):
        super().__init__(folder, max_num_timeout=max_num_timeout, python=python)
        self.slurm = slurm
        self._throttling = 0.0  # our runner already serialises calls; no sleep between submissions

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        """submitit's script; without srun the task line is ``exec``-ed.

        Without srun the task is the batch shell's child. On ``scancel`` the shell exits at the
        SIGTERM that submitit's task ignores; the task is re-parented out of Slurm's process
        tracking (proctrack/linuxproc follows parents) and then outlives its job, never getting
        the SIGKILL. With ``exec`` the task is the tracked batch process itself.
        """
        text = super()._make_submission_file_text(command, uid)
        if self.parameters.get("use_srun", True):
            return text
        lines = text.splitlines(keepends=True)
        for i in range(len(lines) - 1, -1, -1):
            if lines[i].strip() == command.strip():
                lines[i] = "exec " + lines[i].lstrip()
                break
        return "".join(lines)

    def _submit_command(self, command: str) -> core.Job[Any]:
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / f".submission_file_{uuid.uuid4().hex}.sh"
        script.write_text(self._make_submission_file_text(command, script.stem))
        try:
            job_id = str(self.slurm.sbatch(script))
        except BaseException:
            script.unlink(missing_ok=True)
            raise
        job: core.Job[Any] = self.job_class(folder=self.folder, job_id=job_id,
                                            tasks=list(range(self._num_tasks())))
        job.paths.move_temporary_file(script, "submission_file")
        return job

    def submit_array(self, calls: Sequence[Callable[[], Any]], parallelism: int | None) -> list[SlurmJob]:
        """One sbatch array of ``len(calls)`` tasks (each one submitit pickle); returns its jobs."""
        delayed = [DelayedSubmission(call) for call in calls]
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        timeout_min = self.parameters.get("time", 5)
        pickles = []
        for d in delayed:
            path = folder / f".{uuid.uuid4().hex}.pkl"
            d.set_timeout(timeout_min, self.max_num_timeout)
            d.dump(path)
            pickles.append(path)
        array = Backend(self.folder, slurm=self.slurm, max_num_timeout=self.max_num_timeout, python=self.python)
        array.update_parameters(**self.parameters)
        array.parameters["map_count"] = len(delayed)
        array.parameters["array_parallelism"] = parallelism or len(delayed)
        try:
            first = array._submit_command(self._submitit_command_str)
        except BaseException:
            for path in pickles:
                path.unlink(missing_ok=True)
            raise
        tasks = list(range(first.num_tasks))
        jobs = [SlurmJob(folder=self.folder, job_id=f"{first.job_id}_{i}", tasks=tasks)
                for i in range(len(delayed))]
        for job, path in zip(jobs, pickles, strict=True):
            job.paths.move_temporary_file(path, "submitted_pickle")
        return jobs

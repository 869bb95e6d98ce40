"""submitit's SlurmExecutor with its sbatch calls routed through :class:`slinkyml.slurm.Slurm`.

Private submitit API used (checked against 1.5.4; setup.cfg pins below 1.6): ``_submit_command``,
``_make_submission_file_text``, ``_throttling``, and for our own arrays ``_num_tasks``,
``_submitit_command_str``, ``JobPaths.get_first_id_independent_folder``, ``paths.move_temporary_file``.
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

        Otherwise the task is the batch shell's child, escapes process tracking on ``scancel`` and
        outlives its job.
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

    def submit_array(  # type: ignore[override]  # ours also takes the array's parallelism
            self, calls: Sequence[Callable[[], Any]], parallelism: int | None) -> list[SlurmJob]:
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
        jobs: list[SlurmJob[Any]] = [SlurmJob(folder=self.folder, job_id=f"{first.job_id}_{i}", tasks=tasks)
                for i in range(len(delayed))]
        for job, path in zip(jobs, pickles, strict=True):
            job.paths.move_temporary_file(path, "submitted_pickle")
        return jobs

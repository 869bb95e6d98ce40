"""Parallelism planning: split a model over TP x PP x DP, check it fits, write the DeepSpeed config.

Numpy is imported only by the search itself.
"""

from __future__ import annotations

from slinkyml.plan.deepspeed import deepspeed_config
from slinkyml.plan.hardware import Hardware, gpu_hardware, instance_hardware, resolve_hardware
from slinkyml.plan.model import ModelShape, shape_from_params
from slinkyml.plan.search import Candidate, PlanResult, Settings, check, plan

__all__ = [
    "Candidate", "Hardware", "ModelShape", "PlanResult", "Settings", "check", "deepspeed_config",
    "gpu_hardware", "instance_hardware", "plan", "resolve_hardware", "shape_from_params",
]

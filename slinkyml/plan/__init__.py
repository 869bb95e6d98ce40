"""Parallelism planning: split a model over TP x PP x DP, check it fits, write the DeepSpeed config.

Public API (numpy is imported only by the search itself)::

    from slinkyml.plan import ModelShape, Settings, plan, check, deepspeed_config
    result = plan(shape_from_params(200e9), gpu_hardware("a100-80gb"), 64)
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

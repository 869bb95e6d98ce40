"""Model-state memory (parameters, gradients, optimizer) per ZeRO stage, with CPU offload.

Byte accounting follows DeepSpeed's estimators; the ``zero*_model_states_mem_needs`` functions
return the same integers as DeepSpeed's without importing it. :func:`model_state_bytes` is the
per-GPU figure under 3D parallelism the planner uses.
"""

from __future__ import annotations

from typing import Any

from slinkyml.plan._xp import floor, where

PARAM16 = 2  # bf16/fp16 working copy of the parameters
GRAD16 = 2  # 16-bit gradients
SHARDED_STATES = 18  # DeepSpeed's factor: 2 grads16 + 4 grads32 + 4 params32 + 8 Adam moments
OPTIMIZER_STATES = 16  # fp32 master params + fp32 grads + two Adam moments (what offload moves)
FP32_COPY = 4  # an fp32 copy of the parameters (host memory while loading without zero.Init)
ZERO3_STATES_WITH_PARAMS = 18  # ZeRO-3 offload of params too: optimizer states + params16
GATHERED_MODULE = 4  # bytes per parameter of the largest module gathered by ZeRO-3
HOST_BUFFER_FACTOR = 1.5  # DeepSpeed's additional_buffer_factor for pinned host memory


def zero2_model_states_mem_needs(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                                 cpu_offload: bool = True,
                                 additional_buffer_factor: float = 1.5) -> tuple[int, int]:
    """(host bytes per node, bytes per GPU) for ZeRO-2 data parallelism over all GPUs."""
    gpus = num_nodes * num_gpus_per_node
    if not cpu_offload:
        per_gpu = PARAM16 * total_params + int(SHARDED_STATES * total_params / gpus)
        host = total_params * FP32_COPY * num_gpus_per_node * additional_buffer_factor
        return int(host), int(per_gpu)
    # Offloaded: only the 16-bit parameters stay; the host holds the optimizer states, or an
    # fp32 copy per process while loading when that is more.
    host = total_params * max(FP32_COPY * gpus, OPTIMIZER_STATES) * additional_buffer_factor
    return int(host), int(PARAM16 * total_params)


def zero3_model_states_mem_needs(total_params: int, largest_layer_params: int,
                                 num_gpus_per_node: int = 1, num_nodes: int = 1,
                                 cpu_offload: bool = True, cpu_offload_params: bool = True,
                                 zero_init: bool = True,
                                 additional_buffer_factor: float = 1.5) -> tuple[int, int, int]:
    """(host bytes per node, bytes per GPU, bytes of the largest gathered module) for ZeRO-3."""
    gpus = num_nodes * num_gpus_per_node
    node_share = 1 / num_nodes
    gathered = GATHERED_MODULE * largest_layer_params
    if not cpu_offload:
        per_gpu = gathered + int(SHARDED_STATES * total_params / gpus)
        loaded = largest_layer_params if zero_init else total_params
        host = loaded * FP32_COPY * num_gpus_per_node * additional_buffer_factor
        return int(host), int(per_gpu), gathered
    if cpu_offload_params:
        per_gpu = gathered
        on_host = ZERO3_STATES_WITH_PARAMS
    else:
        per_gpu = gathered + int(PARAM16 * total_params / gpus)
        on_host = OPTIMIZER_STATES
    if zero_init:
        host = total_params * on_host * node_share * additional_buffer_factor
    else:
        host = total_params * max(FP32_COPY * num_gpus_per_node, on_host * node_share) \
            * additional_buffer_factor
    return int(host), int(per_gpu), gathered


def model_state_bytes(params_rank: Any, largest_rank: Any, dp: Any, zero: Any,
                      offload_optimizer: Any, offload_params: Any) -> Any:
    """Bytes per GPU of model states for ``params_rank`` parameters held by one TP x PP rank,
    ZeRO-sharded over ``dp`` ranks. Scalars or numpy arrays; equals DeepSpeed's GPU figure when
    tp = pp = 1 (``params_rank`` = all parameters, ``dp`` = all GPUs)."""
    p = params_rank
    z0 = (PARAM16 + SHARDED_STATES) * p
    z1 = where(offload_optimizer, (PARAM16 + GRAD16) * p,
               (PARAM16 + GRAD16) * p + OPTIMIZER_STATES * p / dp)
    z2 = where(offload_optimizer, PARAM16 * p, PARAM16 * p + floor(SHARDED_STATES * p / dp))
    z3_states = where(offload_optimizer,
                      where(offload_params, 0.0, floor(PARAM16 * p / dp)),
                      floor(SHARDED_STATES * p / dp))
    z3 = GATHERED_MODULE * largest_rank + z3_states
    return where(zero == 0, z0, where(zero == 1, z1, where(zero == 2, z2, z3)))


def host_bytes_per_node(params_rank: Any, dp: Any, zero: Any, offload_optimizer: Any,
                        offload_params: Any, gpus_per_node: int) -> Any:
    """Pinned host memory per node for offloaded states in steady state (zero.Init style loading):
    every GPU's shard of fp32 optimizer states (and with ZeRO-3 parameter offload its 16-bit
    parameters), times DeepSpeed's 1.5 buffer factor."""
    per_param = where(offload_params & (zero == 3), ZERO3_STATES_WITH_PARAMS, OPTIMIZER_STATES)
    shard = params_rank / dp
    return where(offload_optimizer & (zero > 0),
                 gpus_per_node * per_param * shard * HOST_BUFFER_FACTOR, 0.0)

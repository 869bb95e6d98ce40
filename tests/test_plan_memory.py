"""Model-state memory equals DeepSpeed's own estimators byte for byte; activations follow
Korthikanti et al. 2022; the array and scalar paths of the planner agree."""

from __future__ import annotations

import itertools
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # never build or probe DeepSpeed ops

import numpy as np
import pytest

try:  # the comparisons with DeepSpeed's estimators need it; the rest of the file does not
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
except ImportError as exc:
    _NO_DEEPSPEED = f"could not import 'deepspeed': {exc}"
else:
    _NO_DEEPSPEED = ""
from hypothesis import given, settings
from hypothesis import strategies as st

from slinkyml.plan.activations import layer_bytes, stage_activation_bytes
from slinkyml.plan.memory import (
    model_state_bytes,
    zero2_model_states_mem_needs,
    zero3_model_states_mem_needs,
)

SIZES = [125_000_000, 1_300_000_000, 6_700_000_000, 13_000_000_000, 70_000_000_000,
         175_000_000_000, 1_000_000_000_000, 123_456_789]
needs_deepspeed = pytest.mark.skipif(bool(_NO_DEEPSPEED), reason=_NO_DEEPSPEED)
GPUS_PER_NODE = [1, 2, 4, 8, 16]
NODES = [1, 2, 3, 8, 64, 512]


@needs_deepspeed
@pytest.mark.parametrize("total", SIZES)
def test_zero2_equals_deepspeed(total: int) -> None:
    for gpn, nodes, offload, buf in itertools.product(GPUS_PER_NODE, NODES, (True, False), (1.5, 1.0)):
        ours = zero2_model_states_mem_needs(total, gpn, nodes, offload, buf)
        theirs = estimate_zero2_model_states_mem_needs(total, gpn, nodes, offload, buf)
        assert ours == theirs, (total, gpn, nodes, offload, buf)


@needs_deepspeed
@pytest.mark.parametrize("total", SIZES)
def test_zero3_equals_deepspeed(total: int) -> None:
    for largest in (total // 50, 4 * 12288**2, 51200 * 25600):
        for gpn, nodes, off, off_p, zinit in itertools.product(
                GPUS_PER_NODE, NODES, (True, False), (True, False), (True, False)):
            ours = zero3_model_states_mem_needs(total, largest, gpn, nodes, off, off_p, zinit)
            theirs = estimate_zero3_model_states_mem_needs(total, largest, gpn, nodes, off, off_p, zinit)
            assert ours == theirs, (total, largest, gpn, nodes, off, off_p, zinit)


@needs_deepspeed
@pytest.mark.parametrize("total", SIZES)
def test_planner_gpu_states_match_deepspeed_without_model_parallelism(total: int) -> None:
    """With TP = PP = 1 the planner's per-GPU figure is DeepSpeed's, for ZeRO-2 and ZeRO-3."""
    largest = total // 40
    for gpn, nodes in itertools.product(GPUS_PER_NODE, NODES):
        n = gpn * nodes
        for off in (False, True):
            _, gpu = estimate_zero2_model_states_mem_needs(total, gpn, nodes, off)
            assert model_state_bytes(total, largest, n, 2, off, False) == gpu
        for off, off_p in ((False, False), (True, False), (True, True)):
            _, gpu, _ = estimate_zero3_model_states_mem_needs(total, largest, gpn, nodes, off, off_p)
            assert model_state_bytes(total, largest, n, 3, off, off_p) == gpu


def test_zero_stages_are_ordered_and_match_zero_paper_shape() -> None:
    p, d = 7.5e9, 64
    z = [model_state_bytes(p, 0, d, k, False, False) for k in range(4)]
    assert z[0] == 20 * p  # 2 + 18 bytes, DeepSpeed's accounting with no sharding
    assert z[1] == (4 + 16 / d) * p
    assert z[0] > z[1] > z[2] > z[3]


def test_korthikanti_activation_table() -> None:
    """Section 4: 34 + 5as/h without parallelism; SP shards everything; selective drops 5as/h."""
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert layer_bytes(s, b, h, a, 1, 0, False) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert layer_bytes(s, b, h, a, t, 0, False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert layer_bytes(s, b, h, a, t, 0, True) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert layer_bytes(s, b, h, a, t, 1, True) == pytest.approx(sbh * 34 / t)
    assert layer_bytes(s, b, h, a, t, 1, False) == pytest.approx(sbh * (10 + 24 / t))
    assert layer_bytes(s, b, h, a, t, 2, False) == pytest.approx(2 * sbh)
    # 1F1B: the first of p stages keeps p micro-batches of L/p layers, i.e. L layers' worth.
    first, _ = stage_activation_bytes(s=s, b=b, h=h, a=a, v=51200, t=t, p=4, micro_batches=64,
                                      first_layers=28, last_layers=28, recompute=1, sp=True)
    assert first == pytest.approx(4 * 28 * sbh * 34 / t + 4 * sbh / t)
    # fewer micro-batches than stages: only m are ever in flight
    few, _ = stage_activation_bytes(s=s, b=b, h=h, a=a, v=51200, t=t, p=4, micro_batches=2,
                                    first_layers=28, last_layers=28, recompute=1, sp=True)
    assert few == pytest.approx(first / 2)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(10**6, 2 * 10**12), dp=st.integers(1, 4096), zero=st.integers(0, 3),
       off=st.booleans(), off_p=st.booleans())
def test_array_and_scalar_model_states_agree(total: int, dp: int, zero: int, off: bool, off_p: bool) -> None:
    off = off and zero > 0
    off_p = off_p and off and zero == 3
    scalar = model_state_bytes(float(total), 1e8, float(dp), zero, off, off_p)
    arr = model_state_bytes(np.array([float(total)] * 2), np.array([1e8] * 2), np.array([float(dp)] * 2),
                            np.array([zero] * 2), np.array([off] * 2), np.array([off_p] * 2))
    assert arr[0] == scalar and arr[1] == scalar

"""The recurrent layers of linear-attention and state-space LLMs (opset 27) against the ONNX
reference: CausalConvWithState (Gated DeltaNet's and Mamba's causal depthwise convolution with
its carried state) and LinearAttention (the linear, gated, delta and gated-delta recurrences,
grouped-query heads, per-head and per-key-dimension decay, a past state)."""
import numpy as np
import pytest
from onnx import helper

from util import assert_refused, check_model, make_model, rand


# ------------------------------------------------------------------------ CausalConvWithState

@pytest.mark.parametrize("b,c,n,k", [(2, 5, 7, 4), (1, 3, 2, 5), (3, 1, 1, 3), (2, 4, 6, 1)])
@pytest.mark.parametrize("past,bias,activation", [
    (False, False, "none"), (True, True, "silu"), (True, False, "swish"), (False, True, "none")])
@pytest.mark.parametrize("const_weight", [False, True])
def test_causal_conv_with_state(tmp_path, b, c, n, k, past, bias, activation, const_weight):
    """Sequences shorter than the kernel (the state keeps part of the past), k = 1 (no state),
    a decode step, run-time and constant weights."""
    feeds = {"x": rand(b, c, n)}
    inits = {}
    (inits if const_weight else feeds)["w"] = rand(c, 1, k, seed=1)
    names = ["x", "w", "bias" if bias else "", "past" if past else ""]
    if bias:
        feeds["bias"] = rand(c, seed=2)
    if past:
        feeds["past"] = rand(b, c, k - 1, seed=3)
    while names[-1] == "":
        names.pop()
    node = helper.make_node("CausalConvWithState", names, ["y", "state"], name="ccws",
                            activation=activation)
    model = make_model([node], feeds, ["y", "state"], initializers=inits, opset=27)
    check_model(model, feeds, tmp_path, reference="onnx")


# ---------------------------------------------------------------------------- LinearAttention

@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("b,t,qh,kvh,dk,dv,decay_dk,beta_one,past", [
    (2, 7, 2, 2, 5, 3, False, False, False),
    (1, 5, 6, 2, 4, 7, True, True, True),        # GQA 3, per-key-dim decay, one beta
    (2, 1, 3, 1, 3, 2, False, False, True),      # MQA, a decode step
])
def test_linear_attention(tmp_path, rule, b, t, qh, kvh, dk, dv, decay_dk, beta_one, past):
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    key = rand(b, t, kvh, dk, seed=1)
    key /= np.linalg.norm(key, axis=-1, keepdims=True)     # L2-normalized, as for delta
    feeds = {"q": rand(b, t, qh * dk), "k": key.reshape(b, t, kvh * dk).astype(np.float32),
             "v": rand(b, t, kvh * dv, seed=2)}
    names = ["q", "k", "v", "", "", ""]
    if past:
        feeds["past"], names[3] = rand(b, kvh, dk, dv, seed=3), "past"
    if gating:
        feeds["decay"] = rand(b, t, kvh * dk if decay_dk else kvh, seed=4, low=-1.0, high=0.0)
        names[4] = "decay"
    if delta:
        feeds["beta"] = rand(b, t, 1 if beta_one else kvh, seed=5, low=0.1, high=0.9)
        names[5] = "beta"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], name="la",
                            update_rule=rule, q_num_heads=qh, kv_num_heads=kvh,
                            **({"scale": 0.3} if past else {}))
    model = make_model([node], feeds, ["y", "state"], opset=27)
    check_model(model, feeds, tmp_path, reference="onnx")


def test_linear_attention_refuses_a_missing_decay(tmp_path):
    feeds = {"q": rand(1, 3, 4), "k": rand(1, 3, 4, seed=1), "v": rand(1, 3, 4, seed=2)}
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], name="la",
                            update_rule="gated", q_num_heads=1, kv_num_heads=1)
    assert_refused(tmp_path, node, feeds, 27, "needs the decay input")

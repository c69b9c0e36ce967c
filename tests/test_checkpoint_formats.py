"""A checkpoint's weight-only formats as inference engines serve them: stored as they are
where narrower than the compute dtype (gpt-oss's MXFP4 experts), read so by the experts' GEMMs."""
import pytest

from core.model.graph import build_decode_layer, narrower_weight_bytes
from core.model.loader import load_hardware, load_model, with_dtype
from core.model.memory import RUNTIME_RESERVE_BYTES, served_weight_bytes, stage_param_parts, stored_weight_bytes
from core.model.ops import gemm
from core.model.specs import Parallelism
from core.serving.engines import engine_spec
from core.serving.service import Pool, kv_tokens, serve
from core.serving.simulate import Load

H100 = load_hardware("h100-sxm5-80gb")
GPT_OSS = load_model("gpt-oss-120b")
MXFP4_BYTES = 0.5 + 1 / 32  # an FP4 value and an E8M0 scale per 32


def test_an_engine_stores_a_weight_in_the_narrower_of_its_checkpoint_format_and_its_compute_dtype():
    assert stored_weight_bytes("mxfp4", H100) == MXFP4_BYTES  # gpt-oss's experts in a BF16 engine
    assert stored_weight_bytes("", H100) == 2.0
    b200_fp4 = with_dtype(load_hardware("b200-sxm-180gb"), "nvfp4", "test", "dtype")
    # DeepSeek-V3's FP8 blocks served in NVFP4 come from a requantized checkpoint
    assert stored_weight_bytes("fp8_block", b200_fp4) == 0.5 + 1 / 16


def test_a_gemm_reads_a_narrower_stored_weight_at_its_stored_size():
    assert narrower_weight_bytes("mxfp4", "bf16") == MXFP4_BYTES
    assert narrower_weight_bytes("mxfp4", "nvfp4") == 0.0  # not narrower than FP4 itself
    assert narrower_weight_bytes("", "bf16") == 0.0
    k = n = 8192
    wide, narrow = gemm(H100, 1, n, k), gemm(H100, 1, n, k, weight_bytes=MXFP4_BYTES)
    # one row: the weight's bytes are all but the row in and out (2 bytes each)
    assert wide.hbm_bytes == k * n * 2 + (k + n) * 2
    assert narrow.hbm_bytes == k * n * MXFP4_BYTES + (k + n) * 2
    assert narrow.time_s < 0.5 * wide.time_s  # a quarter of the bytes, beside a fixed launch
    assert narrow.flops == wide.flops


def test_gpt_oss_decode_reads_its_experts_in_mxfp4():
    spec = next(spec for spec, _ in GPT_OSS.layer_groups())  # sliding and full layers share their FFN
    layer = {op.name: op for op in build_decode_layer(spec, H100, 1, 1024, 1, 2.0)}
    per_expert = GPT_OSS.hidden * GPT_OSS.moe.expert_ffn_hidden
    touched = GPT_OSS.moe.top_k  # one token reaches top_k experts
    assert layer["mlp_up"].hbm_bytes == pytest.approx(2 * per_expert * touched * MXFP4_BYTES, rel=0.01)
    assert layer["mlp_down"].hbm_bytes == pytest.approx(per_expert * touched * MXFP4_BYTES, rel=0.01)


def test_gpt_oss_120b_is_served_from_one_80_gb_gpu():
    par = Parallelism(tp=1)
    (dense, expert), = stage_param_parts(GPT_OSS, par)
    weights = dense * 2.0 + expert * MXFP4_BYTES
    assert served_weight_bytes(GPT_OSS, H100, par) == pytest.approx(weights)
    assert weights + RUNTIME_RESERVE_BYTES < H100.gpu.hbm.capacity_bytes < dense * 2.0 + expert * 2.0
    engine = engine_spec("vllm")
    assert kv_tokens(GPT_OSS, H100, Pool(), engine, 2.0) > 2048
    record = serve(GPT_OSS, H100, engine, Load(1024, 128, concurrency=4, requests=20), Pool())
    assert record["feasible"] and record["tpot_s"] > 0


def test_deepseek_v3s_fp8_blocks_in_a_bf16_engine_are_read_as_stored_by_its_layers_and_experts():
    h200 = load_hardware("h200-sxm-141gb")
    deepseek = load_model("deepseek-v3")
    fp8_block = 1 + 4 / (128 * 128)
    spec = next(spec for spec, _ in deepseek.layer_groups() if spec.moe is not None)
    layer = {op.name: op for op in build_decode_layer(spec, h200, 1, 1024, 8, 2.0)}
    down = spec.hidden * (spec.mla.q_lora_rank + spec.mla.latent_dim)  # whole on every rank
    # the weight as stored, not widened to BF16 (twice it): the row and, on Hopper, where cuBLAS's
    # tile sized to one token splits k 16 ways, the FP32 partial sums add 1.9 % to it (4 ways: 0.6 %)
    assert layer["mla_down"].hbm_bytes == pytest.approx(down * fp8_block, rel=0.02)
    per_expert = spec.hidden * spec.moe.expert_ffn_hidden // 8
    assert layer["mlp_down"].hbm_bytes == pytest.approx(per_expert * spec.moe.top_k * fp8_block, rel=0.01)

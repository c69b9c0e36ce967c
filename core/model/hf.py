"""Hugging Face `config.json` of the decoder families rapid-sweep models, read as their
reference implementations (transformers, vLLM, Megatron-Core) use them. Every key of a family
is costed (HF_COSTED: it changes compute, memory or communication and is modelled, or refused
at a value that is not) or costs nothing (HF_COSTLESS: names, token ids, initialisation, norm
epsilon, rotary details, router loss and scoring terms, generation defaults); any other key
is refused by name."""
from dataclasses import replace
from pathlib import Path

from core.errors import SpecError
from .specs import LayerKind, MLASpec, ModelSpec, MoESpec, RecurrentSpec, model_with_kinds

HF_ACTIVATIONS = ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh")
_HF_SHAPE = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings", "hidden_act", "attention_dropout")
_QWEN_WINDOW = ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")
_QWEN_MOE = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers")
_DEEPSEEK = (*_HF_SHAPE, "attention_bias", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
             "v_head_dim", "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
             "n_group", "topk_group", "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers",
             "quantization_config", "qk_head_dim")  # qk_head_dim: transformers' save_pretrained writes it
HF_COSTED = {
    "llama": (*_HF_SHAPE, "attention_bias", "mlp_bias"),
    "mistral": (*_HF_SHAPE, "sliding_window"),
    "qwen2": (*_HF_SHAPE, *_QWEN_WINDOW),
    "qwen3": (*_HF_SHAPE, "attention_bias", *_QWEN_WINDOW),
    "mixtral": (*_HF_SHAPE, "sliding_window", "num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": (*_HF_SHAPE, *_QWEN_WINDOW, *_QWEN_MOE, "shared_expert_intermediate_size"),
    "qwen3_moe": (*_HF_SHAPE, "attention_bias", *_QWEN_WINDOW, *_QWEN_MOE),
    "deepseek_v3": _DEEPSEEK,
    "kimi_k2": _DEEPSEEK,
    "glm_moe_dsa": (*_DEEPSEEK, "index_topk", "index_n_heads", "index_head_dim"),
    "gpt_oss": (*_HF_SHAPE, "attention_bias", "layer_types", "sliding_window", "num_local_experts",
                "num_experts_per_tok", "experts_per_token", "quantization_config"),
    "llama4_text": (*_HF_SHAPE, "attention_bias", "attention_chunk_size", "no_rope_layers", "interleave_moe_layer_step",
                    "moe_layers", "num_local_experts", "num_experts_per_tok", "intermediate_size_mlp"),
    "qwen3_5_moe_text": (*_HF_SHAPE, "attention_bias", "attn_output_gate", "layer_types", "full_attention_interval",
                         "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads",
                         "linear_num_value_heads", "linear_value_head_dim", "num_experts", "num_experts_per_tok",
                         "moe_intermediate_size", "shared_expert_intermediate_size", "mlp_only_layers",
                         "decoder_sparse_step", "mtp_num_hidden_layers"),
    "nemotron_h": (*_HF_SHAPE, "attention_bias", "hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                   "n_groups", "conv_kernel", "chunk_size", "mlp_hidden_act", "n_routed_experts", "n_shared_experts",
                   "num_experts_per_tok", "moe_intermediate_size", "moe_shared_expert_intermediate_size", "n_group",
                   "topk_group", "sliding_window", "mlp_bias", "use_bias", "mamba_proj_bias", "hidden_dropout",
                   "mamba_ssm_cache_dtype"),
    "gemma4_text": (*_HF_SHAPE, "hidden_activation", "attention_bias", "layer_types", "sliding_window",
                    "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "enable_moe_block",
                    "num_experts", "top_k_experts", "moe_intermediate_size", "hidden_size_per_layer_input",
                    "num_kv_shared_layers", "use_double_wide_mlp"),
    "minimax_m2": (*_HF_SHAPE, "attn_type_list", "num_local_experts", "num_experts_per_tok", "shared_intermediate_size",
                   "use_mtp", "num_mtp_modules", "mtp_transformer_layers", "quantization_config"),
}
# Multimodal wrappers: the decoder's keys sit under text_config; the vision (and audio) tower
# runs only on media inputs, which rapid-sweep's text workloads do not have.
HF_WRAPPERS = {"llama4": "llama4_text", "qwen3_5_moe": "qwen3_5_moe_text", "kimi_k25": "kimi_k2",
               "gemma4": "gemma4_text"}
_WRAPPER_KEYS = ("model_type", "text_config", "vision_config", "audio_config", "tie_word_embeddings", "architectures",
                 "auto_map", "transformers_version", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
                 "pad_token_id", "initializer_range", "image_token_id", "video_token_id", "audio_token_id",
                 "vision_start_token_id", "vision_end_token_id", "boa_token_id", "boi_token_id", "eoa_token_id",
                 "eoa_token_index", "eoi_token_id", "vision_soft_tokens_per_image", "ignore_index",
                 "media_placeholder_token_id", "use_unified_vision_chunk", "video_placeholder")
HF_MODEL_TYPES = tuple(HF_COSTED) + tuple(HF_WRAPPERS)
_HF_ANY = ("_name_or_path", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype",
           "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "use_cache",
           "max_position_embeddings", "rope_theta", "rope_scaling", "rope_parameters", "tokenizer_class",
           "output_attentions", "output_hidden_states", "return_dict", "use_bfloat16", "torchscript")
_HF_ROUTER = ("norm_topk_prob", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise")
# transformers' PretrainedConfig defaults a saved config may carry: generation settings and
# bookkeeping, read by nothing that runs the model's layers
_HF_GENERIC = ("add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward",
               "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample",
               "early_stopping", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty", "finetuning_task",
               "forced_bos_token_id", "forced_eos_token_id", "id2label", "is_decoder", "is_encoder_decoder", "label2id",
               "length_penalty", "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups", "num_beams",
               "num_return_sequences", "output_scores", "prefix", "problem_type", "pruned_heads",
               "remove_invalid_values", "repetition_penalty", "return_dict_in_generate", "sep_token_id",
               "suppress_tokens", "task_specific_params", "temperature", "tf_legacy_loss", "tie_encoder_decoder",
               "top_k", "top_p", "typical_p")
_DEEPSEEK_FREE = (*_HF_ROUTER, "pretraining_tp", "ep_size", "routed_scaling_factor", "scoring_func", "topk_method", "aux_loss_alpha",
                  "seq_aux", "rope_interleave", "indexer_rope_interleave", "_attn_implementation")
_EXTRA_COSTLESS = {
    "llama": ("pretraining_tp",),
    "deepseek_v3": _DEEPSEEK_FREE + _HF_GENERIC,
    "kimi_k2": _DEEPSEEK_FREE + _HF_GENERIC,
    "glm_moe_dsa": _DEEPSEEK_FREE,
    "gpt_oss": (*_HF_ROUTER, "swiglu_limit", "initial_context_length"),
    "llama4_text": (*_HF_ROUTER, "use_qk_norm", "attn_temperature_tuning", "floor_scale", "attn_scale",
                    "for_llm_compressor", "rope_scaling"),
    "qwen3_5_moe_text": (*_HF_ROUTER, "mamba_ssm_dtype", "mtp_use_dedicated_embeddings", "partial_rotary_factor"),
    "nemotron_h": (*_HF_ROUTER, "layer_norm_epsilon", "mamba_hidden_act", "norm_eps", "num_logits_to_keep",
                   "partial_rotary_factor", "rescale_prenorm_residual", "residual_in_fp32", "routed_scaling_factor",
                   "time_step_floor", "time_step_max", "time_step_min", "use_conv_bias", "use_mamba_kernels",
                   "expand"),
    "gemma4_text": ("final_logit_softcapping", "use_bidirectional_attention", "vocab_size_per_layer_input"),
    "minimax_m2": (*_HF_ROUTER, "qk_norm_type", "use_qk_norm", "rotary_dim", "scoring_func", "use_routing_bias"),
}
HF_COSTLESS = {family: _HF_ANY + _EXTRA_COSTLESS.get(family, ())
               + (_HF_ROUTER if family in ("mixtral", "qwen2_moe", "qwen3_moe") else ()) for family in HF_COSTED}
# keys accepted only at the value that costs nothing (biases, dropout, switches off)
HF_NEUTRAL = {"attention_bias": False, "mlp_bias": False, "attention_dropout": 0, "hidden_dropout": 0,
              "use_bias": False, "mamba_proj_bias": False, "is_encoder_decoder": False, "add_cross_attention": False,
              "chunk_size_feed_forward": 0, "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,
              "use_double_wide_mlp": False}
# families whose biases are modelled (their parameters counted; the adds ride in the GEMM epilogue)
_BIASED = ("gpt_oss",)
QWEN_MAX_WINDOW_LAYERS = 28  # transformers' default max_window_layers for the Qwen families
LLAMA4_GLOBAL_EVERY = 4  # transformers' Llama 4 default: every 4th layer attends globally, without RoPE
# quantization_config -> (checkpoint weight format, does it cover the experts only)
_NEMOTRON_BLOCKS = {"M": LayerKind("mamba", ffn="none"), "*": LayerKind("attention", ffn="none"),
                    "-": LayerKind("none", ffn="dense"), "E": LayerKind("none", ffn="moe")}


class _Config:
    """Typed reads of one config mapping; every problem a SpecError naming the field."""

    def __init__(self, data: dict, source: str, prefix: str = ""):
        self.data, self.source, self.prefix = data, source, prefix

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def fail(self, key: str, allowed: str, value=None):
        shown = value if value is not None else self.data.get(key, "<missing>")
        raise SpecError(self.source, self.prefix + key, shown, allowed)

    def int(self, key: str, default=None, minimum: int = 1) -> int:
        value = default if self.data.get(key) is None else self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            self.fail(key, f"expected {wanted} in this Hugging Face config", value if key in self.data else "<missing>")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, "expected true or false")
        return value

    def index_list(self, key: str) -> list:
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            self.fail(key, "expected a list of layer indices")
        return value


def model_from_hf(data: dict, source: str, name: str = "") -> ModelSpec:
    """A Hugging Face config.json of a family in HF_MODEL_TYPES (a multimodal wrapper's
    text_config for those in HF_WRAPPERS), named `name`, else its _name_or_path, else after
    its file."""
    model_type = data.get("model_type", "<missing>")
    name = name or data.get("_name_or_path") or _name_from_path(source)
    prefix = ""
    tied = data.get("tie_word_embeddings")
    if model_type in HF_WRAPPERS:
        for key, value in data.items():
            if key not in _WRAPPER_KEYS:
                raise SpecError(source, key, value, f"not a {model_type} key rapid-sweep costs or knows to cost nothing "
                                "(the decoder's keys sit under text_config; see docs/model.md)")
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise SpecError(source, "text_config", text, "expected the decoder's config, a mapping")
        prefix, inner = "text_config.", HF_WRAPPERS[model_type]
        data = {**text, "model_type": text.get("model_type", inner)}
        if tied is not None and "tie_word_embeddings" not in text:
            data["tie_word_embeddings"] = tied
        model_type = data["model_type"]
        if model_type != inner:
            raise SpecError(source, "text_config.model_type", model_type, f"expected {inner} inside a {data} config")
    if model_type not in HF_COSTED:
        raise SpecError(source, prefix + "model_type", model_type,
                        f"not a model family rapid-sweep models (supported: {', '.join(HF_MODEL_TYPES)})")
    known = HF_COSTED[model_type] + HF_COSTLESS[model_type]
    for key, value in data.items():
        if key not in known:
            raise SpecError(source, prefix + key, value, f"not a {model_type} key rapid-sweep costs or knows to cost "
                            f"nothing (costed: {', '.join(HF_COSTED[model_type])}; see docs/model.md)")
        neutral = key in HF_NEUTRAL and not (key == "attention_bias" and model_type in _BIASED)
        if neutral and value not in (None, HF_NEUTRAL[key]):
            raise SpecError(source, prefix + key, value, f"not modelled; accepted only as {str(HF_NEUTRAL[key]).lower()}")
    c = _Config(data, source, prefix)
    reader = _READERS.get(model_type, _read_llama_like)
    return reader(c, model_type, str(name))


def _name_from_path(source: str) -> str:
    """A config's model name: the file's (`deepseek-ai--DeepSeek-V3.json` -> DeepSeek-V3, an
    `<org>--<model>` stem losing its organisation), or its folder's for a plain config.json."""
    path = Path(source)
    stem = path.stem if path.stem != "config" else path.parent.name
    return stem.split("--")[-1] or "hf-model"


def _base(c: _Config, model_type: str, name: str, ffn_key: str = "intermediate_size") -> dict:
    """The fields every family shares: layer count, widths, heads, vocabulary, tying."""
    act = c.data.get("hidden_act", "silu")
    if act not in HF_ACTIVATIONS:
        c.fail("hidden_act", f"expected one of {', '.join(HF_ACTIVATIONS)}")
    layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", heads)
    if kv_heads > heads or heads % kv_heads:
        c.fail("num_key_value_heads", f"expected a divisor of num_attention_heads ({heads})")
    hidden = c.int("hidden_size")
    if hidden % heads and not c.has("head_dim"):
        c.fail("hidden_size", f"not divisible by num_attention_heads ({heads}): give head_dim")
    head_dim = c.int("head_dim", hidden // heads)
    # every family here gates its MLP, act(gate) * up (three matrices); hidden_act only picks
    # the function, which costs the same pointwise pass
    return dict(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                ffn_hidden=c.int(ffn_key), vocab=c.int("vocab_size"), activation="swiglu",
                norm="rmsnorm", tied_embeddings=c.flag("tie_word_embeddings"), position_embedding="rotary",
                attention_kernel="flash", attention_head_dim=0 if head_dim * heads == hidden else head_dim)


def _moe(c: _Config, experts_key: str, ffn_key: str, top_key: str = "num_experts_per_tok", shared: int = 0,
         groups: int = 0, groups_per_token: int = 0) -> MoESpec:
    moe = MoESpec(experts=c.int(experts_key), top_k=c.int(top_key), expert_ffn_hidden=c.int(ffn_key),
                  shared_expert_ffn_hidden=shared, groups=groups, groups_per_token=groups_per_token)
    if moe.top_k > moe.experts:
        c.fail(top_key, f"expected at most {experts_key} ({moe.experts})")
    return moe


def _window_of(c: _Config, key: str = "sliding_window") -> int:
    window = c.data.get(key)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        c.fail(key, "expected a positive integer (tokens) or null")
    return window


def _attention_kinds(c: _Config, model_type: str, layers: int) -> list:
    """Per layer, full or sliding-window attention as transformers builds it: Mistral and
    Mixtral slide every layer when sliding_window is set; Qwen's layer_types when given, else
    use_sliding_window slides the layers from max_window_layers on."""
    if model_type in ("mistral", "mixtral"):
        return [LayerKind(window=_window_of(c) if c.has("sliding_window") else 0)] * layers
    if c.has("layer_types"):
        return _typed_layers(c, layers, {"full_attention": 0, "sliding_attention": None})
    first = c.int("max_window_layers", QWEN_MAX_WINDOW_LAYERS, minimum=0)
    if not (c.flag("use_sliding_window") and c.has("sliding_window")):
        return [LayerKind()] * layers
    window = _window_of(c)
    return [LayerKind(window=window if i >= first else 0) for i in range(layers)]


def _typed_layers(c: _Config, layers: int, windows: dict) -> list:
    """LayerKinds from a layer_types list: each name's window (None: sliding_window)."""
    types = c.data["layer_types"]
    if not isinstance(types, list) or len(types) != layers or any(t not in windows for t in types):
        c.fail("layer_types", f"expected {layers} entries, each one of {', '.join(windows)}")
    window = _window_of(c) if None in (windows[t] for t in types) else 0
    return [LayerKind(window=window if windows[t] is None else windows[t]) for t in types]


def _with_ffn(kinds: list, moe_layers) -> list:
    return [replace(k, ffn="moe" if i in moe_layers else "dense") for i, k in enumerate(kinds)]


def _read_llama_like(c: _Config, model_type: str, name: str) -> ModelSpec:
    """Llama, Mistral, Qwen2/3 and their MoE (Mixtral, Qwen2-MoE with its shared expert,
    Qwen3-MoE): per-layer sliding windows, and Qwen MoE's dense layers (mlp_only_layers,
    decoder_sparse_step: layer i is MoE when (i + 1) % step == 0 and it is not listed)."""
    base = _base(c, model_type, name)
    layers = base["layers"]
    kinds = _attention_kinds(c, model_type, layers)
    experts_key = "num_local_experts" if model_type == "mixtral" else "num_experts"
    moe, moe_layers = None, ()
    if c.data.get(experts_key):
        shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
        ffn_key = "intermediate_size" if model_type == "mixtral" else "moe_intermediate_size"
        moe = _moe(c, experts_key, ffn_key, shared=shared)
        step = c.int("decoder_sparse_step", 1)
        dense_only = set(c.index_list("mlp_only_layers"))
        moe_layers = {i for i in range(layers) if (i + 1) % step == 0 and i not in dense_only}
    elif model_type.endswith("_moe") or model_type == "mixtral":
        c.fail(experts_key, f"a {model_type} config needs a positive expert count")
    return model_with_kinds(base, _with_ffn(kinds, moe_layers), moe=moe)


def _quantization(c: _Config) -> tuple:
    """(layers' weight format, experts' weight format) a quantization_config sets: DeepSeek's
    and MiniMax's FP8 with 128 x 128 blocks, gpt-oss's MXFP4 experts, NVFP4 (modelopt), and
    compressed-tensors' 4-bit integers in groups of 32 on the routed experts (Kimi-K2.5)."""
    q = c.data.get("quantization_config")
    if q is None:
        return "", ""
    method = q.get("quant_method") if isinstance(q, dict) else None
    if method == "fp8" and q.get("weight_block_size") in ([128, 128], None):
        return "fp8_block", ""
    if method == "mxfp4":
        return "", "mxfp4"
    if method == "modelopt" and str(q.get("quant_algo", "")).upper() == "NVFP4":
        return "nvfp4", ""
    if method == "compressed-tensors":
        weights = [g.get("weights") or {} for g in (q.get("config_groups") or {}).values()]
        if weights and all(w.get("num_bits") == 4 and w.get("group_size") == 32 and w.get("type") == "int"
                           for w in weights):
            return "", "int4_group32"
    c.fail("quantization_config", "expected fp8 (128 x 128 blocks), mxfp4, modelopt NVFP4 or compressed-tensors "
           "int4 in groups of 32", method or q)


def _read_deepseek(c: _Config, model_type: str, name: str) -> ModelSpec:
    """DeepSeek-V3 / Kimi-K2 and GLM-5 (glm_moe_dsa): MLA, a shared expert beside fine-grained
    routed ones with group-limited routing, dense first layers (first_k_dense_replace), MoE
    every moe_layer_freq-th layer after them, MTP modules, and for GLM-5 DeepSeek sparse
    attention's indexer."""
    base = _base(c, model_type, name)
    layers, heads = base["layers"], base["heads"]
    base.update(kv_heads=heads, attention_head_dim=0)
    if c.has("qk_head_dim") and c.int("qk_head_dim") != c.int("qk_nope_head_dim") + c.int("qk_rope_head_dim"):
        c.fail("qk_head_dim", "expected qk_nope_head_dim + qk_rope_head_dim")
    index_topk = c.int("index_topk", 0, minimum=0)
    mla = MLASpec(q_lora_rank=c.int("q_lora_rank", 0, minimum=0), kv_lora_rank=c.int("kv_lora_rank"),
                  qk_nope_head_dim=c.int("qk_nope_head_dim"), qk_rope_head_dim=c.int("qk_rope_head_dim"),
                  v_head_dim=c.int("v_head_dim"), index_topk=index_topk,
                  index_heads=c.int("index_n_heads") if index_topk else 0,
                  index_head_dim=c.int("index_head_dim") if index_topk else 0)
    groups = c.int("n_group", 1)
    per_token = c.int("topk_group", groups)
    if groups % 1 or per_token > groups:
        c.fail("topk_group", f"expected at most n_group ({groups})")
    shared = c.int("n_shared_experts", 0, minimum=0) * c.int("moe_intermediate_size")
    moe = _moe(c, "n_routed_experts", "moe_intermediate_size", shared=shared,
               groups=groups if groups > 1 else 0, groups_per_token=per_token if groups > 1 else 0)
    if moe.experts % groups:
        c.fail("n_group", f"expected a divisor of n_routed_experts ({moe.experts})")
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    if first_dense >= layers:
        c.fail("first_k_dense_replace", f"expected fewer than num_hidden_layers ({layers}): the layers after it are MoE")
    freq = c.int("moe_layer_freq", 1)
    moe_layers = {i for i in range(layers) if i >= first_dense and i % freq == 0}
    weights, experts = _quantization(c)
    return model_with_kinds(base, _with_ffn([LayerKind()] * layers, moe_layers), moe=moe, mla=mla,
                 mtp_layers=c.int("num_nextn_predict_layers", 0, minimum=0),
                 weight_dtype=weights, expert_weight_dtype=experts)


def _read_gpt_oss(c: _Config, model_type: str, name: str) -> ModelSpec:
    """gpt-oss: sliding (sliding_window, 128) and full attention alternating by layer_types,
    a learned sink logit per head (one more score per row, nothing else), biases on the
    attention projections and on the experts, every layer MoE (intermediate_size per expert),
    MXFP4 experts from its quantization_config."""
    base = _base(c, model_type, name)
    top = "experts_per_token" if c.has("experts_per_token") else "num_experts_per_tok"
    if c.has("experts_per_token") and c.data.get("num_experts_per_tok") not in (None, c.data["experts_per_token"]):
        c.fail("num_experts_per_tok", f"expected experts_per_token ({c.data['experts_per_token']})")
    moe = _moe(c, "num_local_experts", "intermediate_size", top_key=top)
    kinds = _typed_layers(c, base["layers"], {"full_attention": 0, "sliding_attention": None}) if c.has(
        "layer_types") else [LayerKind()] * base["layers"]
    weights, experts = _quantization(c)
    return model_with_kinds(base, _with_ffn(kinds, range(base["layers"])), moe=moe,
                 attention_bias=c.flag("attention_bias"), weight_dtype=weights, expert_weight_dtype=experts)


def _read_llama4(c: _Config, model_type: str, name: str) -> ModelSpec:
    """Llama 4: chunked local attention (attention_chunk_size) on the RoPE layers, global
    attention on the NoPE ones (no_rope_layers: 0 marks them; every 4th by default); MoE on
    moe_layers (every interleave_moe_layer_step-th by default) with a shared expert as wide as
    a routed one (intermediate_size), dense layers intermediate_size_mlp wide."""
    base = _base(c, model_type, name)
    layers = base["layers"]
    chunk = c.int("attention_chunk_size", 0, minimum=0)
    rope = c.data.get("no_rope_layers") or [int((i + 1) % LLAMA4_GLOBAL_EVERY != 0) for i in range(layers)]
    if not isinstance(rope, list) or len(rope) != layers:
        c.fail("no_rope_layers", f"expected {layers} entries of 0 (global, no RoPE) or 1")
    step = c.int("interleave_moe_layer_step", 1)
    moe_layers = set(c.index_list("moe_layers")) if c.has("moe_layers") else set(range(step - 1, layers, step))
    expert_ffn = c.int("intermediate_size")
    base["ffn_hidden"] = c.int("intermediate_size_mlp", expert_ffn)
    moe = _moe(c, "num_local_experts", "intermediate_size", shared=expert_ffn)
    kinds = [LayerKind(chunk=chunk if rope[i] else 0) for i in range(layers)]
    return model_with_kinds(base, _with_ffn(kinds, moe_layers), moe=moe)


def _read_qwen3_5(c: _Config, model_type: str, name: str) -> ModelSpec:
    """Qwen3.5 (and Qwen3-Next): layer_types mixing Gated DeltaNet linear attention with gated
    full attention (attn_output_gate; every full_attention_interval-th layer by default), MoE
    with a shared expert (its sigmoid gate a hidden-wide vector) on every layer but
    mlp_only_layers, MTP layers."""
    base = _base(c, model_type, name, "intermediate_size" if c.has("intermediate_size") else "moe_intermediate_size")
    layers = base["layers"]
    interval = c.int("full_attention_interval", 4)
    if c.has("layer_types"):
        types = c.data["layer_types"]
        if not isinstance(types, list) or len(types) != layers or any(
                t not in ("linear_attention", "full_attention") for t in types):
            c.fail("layer_types", f"expected {layers} entries, each linear_attention or full_attention")
    else:
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    recurrent = RecurrentSpec("gated_deltanet", heads=c.int("linear_num_value_heads"),
                              key_heads=c.int("linear_num_key_heads"), key_dim=c.int("linear_key_head_dim"),
                              value_dim=c.int("linear_value_head_dim"), conv_kernel=c.int("linear_conv_kernel_dim", 4))
    if recurrent.heads % recurrent.key_heads:
        c.fail("linear_num_value_heads", f"expected a multiple of linear_num_key_heads ({recurrent.key_heads})")
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    moe = _moe(c, "num_experts", "moe_intermediate_size", shared=shared)
    step = c.int("decoder_sparse_step", 1)
    dense_only = set(c.index_list("mlp_only_layers"))
    moe_layers = {i for i in range(layers) if (i + 1) % step == 0 and i not in dense_only}
    kinds = [LayerKind("attention" if t == "full_attention" else "linear") for t in types]
    return model_with_kinds(base, _with_ffn(kinds, moe_layers), moe=moe, recurrent=recurrent,
                 attention_gate=c.flag("attn_output_gate"), mtp_layers=c.int("mtp_num_hidden_layers", 0, minimum=0))


def _read_nemotron_h(c: _Config, model_type: str, name: str) -> ModelSpec:
    """Nemotron-H / Nemotron-3: one block per layer as hybrid_override_pattern spells it:
    M a Mamba-2 mixer, * attention, - a dense MLP, E an MoE (routed experts and a shared one),
    each behind its own norm; the MLPs are squared-ReLU (two matrices)."""
    base = _base(c, model_type, name)
    pattern = c.data.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != base["layers"] or set(pattern) - set(_NEMOTRON_BLOCKS):
        c.fail("hybrid_override_pattern", f"expected {base['layers']} characters of M, *, - and E")
    if c.has("sliding_window"):
        c.fail("sliding_window", "not modelled for nemotron_h; accepted only as null")
    act = c.data.get("mlp_hidden_act", "relu2")
    if act != "relu2":
        c.fail("mlp_hidden_act", "expected relu2 (squared ReLU)")
    dtype = c.data.get("mamba_ssm_cache_dtype", "float32")
    if dtype != "float32":
        c.fail("mamba_ssm_cache_dtype", "expected float32 (the state rapid-sweep keeps)")
    base["activation"] = "squared_relu"
    heads = c.int("mamba_num_heads")
    recurrent = RecurrentSpec("mamba2", heads=heads, key_heads=c.int("n_groups", 1), key_dim=c.int("ssm_state_size"),
                              value_dim=c.int("mamba_head_dim"), conv_kernel=c.int("conv_kernel", 4))
    c.int("chunk_size", 128)
    moe = None
    if "E" in pattern:
        groups = c.int("n_group", 1)
        shared = c.int("n_shared_experts", 0, minimum=0) * c.int("moe_shared_expert_intermediate_size", 0, minimum=0)
        moe = _moe(c, "n_routed_experts", "moe_intermediate_size", shared=shared,
                   groups=groups if groups > 1 else 0, groups_per_token=c.int("topk_group", groups) if groups > 1 else 0)
    kinds = [_NEMOTRON_BLOCKS[ch] for ch in pattern]
    return model_with_kinds(base, kinds, moe=moe, recurrent=recurrent)


def _read_minimax(c: _Config, model_type: str, name: str) -> ModelSpec:
    """MiniMax-M2: full softmax attention on every layer (attn_type_list 1; 0, lightning
    attention, is refused), every layer MoE (intermediate_size per expert), MTP modules when
    use_mtp, FP8 block weights."""
    base = _base(c, model_type, name)
    types = c.data.get("attn_type_list") or [1] * base["layers"]
    if not isinstance(types, list) or len(types) != base["layers"] or set(types) != {1}:
        c.fail("attn_type_list", f"expected {base['layers']} entries of 1 (softmax attention; lightning attention "
               "is not modelled)")
    if c.int("shared_intermediate_size", 0, minimum=0):
        c.fail("shared_intermediate_size", "not modelled for minimax_m2; accepted only as 0")
    moe = _moe(c, "num_local_experts", "intermediate_size")
    mtp = c.int("num_mtp_modules", 0, minimum=0) * c.int("mtp_transformer_layers", 1) if c.flag("use_mtp") else 0
    weights, experts = _quantization(c)
    return model_with_kinds(base, [LayerKind(ffn="moe")] * base["layers"], moe=moe, mtp_layers=mtp,
                 weight_dtype=weights, expert_weight_dtype=experts)


def _read_gemma4(c: _Config, model_type: str, name: str) -> ModelSpec:
    """Gemma 4: sliding-window (sliding_window) and global layers by layer_types; the global
    ones with heads of global_head_dim and, under attention_k_eq_v, num_global_key_value_heads
    KV heads whose values are their keys (no value projection, one cached tensor); a gated GELU
    MLP (hidden_activation); with enable_moe_block, an MoE block (num_experts, top_k_experts,
    moe_intermediate_size) beside the dense MLP on every layer, costed as an MoE with a shared
    expert of intermediate_size."""
    act = c.data.get("hidden_activation", "gelu_pytorch_tanh")
    if act not in HF_ACTIVATIONS:
        c.fail("hidden_activation", f"expected one of {', '.join(HF_ACTIVATIONS)}")
    base = _base(c, model_type, name)
    layers = base["layers"]
    k_eq_v = c.flag("attention_k_eq_v")
    global_kv = c.int("num_global_key_value_heads", base["kv_heads"]) if k_eq_v else 0
    if global_kv and base["heads"] % global_kv:
        c.fail("num_global_key_value_heads", f"expected a divisor of num_attention_heads ({base['heads']})")
    global_kind = LayerKind(head_dim=c.int("global_head_dim", 0, minimum=0), kv_heads=global_kv, value_is_key=k_eq_v)
    if c.has("layer_types"):
        kinds = [k if k.window else global_kind
                 for k in _typed_layers(c, layers, {"full_attention": 0, "sliding_attention": None})]
    else:
        kinds = [global_kind] * layers
    if base["attention_head_dim"] == 0:
        base["attention_head_dim"] = c.int("head_dim", base["hidden"] // base["heads"])
    moe = None
    if c.flag("enable_moe_block"):
        moe = _moe(c, "num_experts", "moe_intermediate_size", top_key="top_k_experts", shared=base["ffn_hidden"])
    return model_with_kinds(base, _with_ffn(kinds, range(layers) if moe else ()), moe=moe)


_READERS = {"deepseek_v3": _read_deepseek, "kimi_k2": _read_deepseek, "glm_moe_dsa": _read_deepseek,
            "gpt_oss": _read_gpt_oss, "llama4_text": _read_llama4, "qwen3_5_moe_text": _read_qwen3_5,
            "nemotron_h": _read_nemotron_h, "minimax_m2": _read_minimax, "gemma4_text": _read_gemma4}

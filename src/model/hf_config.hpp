// The subset of a Hugging Face config.json that layertap's decoder families need, validated once.
// A decoder layer is assembled from parts chosen here per layer: an attention part (GQA or MLA)
// and an FFN part (dense SwiGLU or MoE). A family's differences are parameters of those parts
// (partial rotary, biases, q/k norm, routing, tensor names), not code of its own; see
// docs/MODELS.md, "Architectures".
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/quant_config.hpp"

namespace layertap {

struct RopeConfig {
  enum class Type { Default, Linear, Llama3, Yarn };  // Linear: inv_freq / factor (Gemma-3's global layers)
  Type type = Type::Default;
  double theta = 10000.0;
  // llama3 frequency scaling (transformers' _compute_llama3_parameters) and YaRN share these two.
  double factor = 1.0;
  int64_t original_max_position_embeddings = 8192;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // YaRN (transformers' _compute_yarn_parameters): ramp between the beta_fast/beta_slow dims;
  // cos and sin are multiplied by attention_factor.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 1.0;
  double mscale_all_dim = 0.0;  // DeepSeek: also scales the softmax (see MlaConfig::softmax_scale)
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2). Every head has its own k_nope and v from
// kv_b_proj and shares one rope key; num_key_value_heads equals num_attention_heads.
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: q_proj reads the hidden state directly
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = true;  // rope dims stored as pairs (x0, x1), (x2, x3), ...
  bool bias = false;            // attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj
  double softmax_scale = 0.0;   // qk_head_dim^-0.5, times the YaRN mscale squared
  // transformers builds q_a_layernorm/kv_a_layernorm with DeepseekV3RMSNorm's default eps, not
  // rms_norm_eps.
  static constexpr double kLatentNormEps = 1e-6;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Where a MoE block's tensors are, under the layer's prefix ("model.layers.3."): the router
// `block``router`.weight, routed expert E's projections `block`experts.E.<gate|up|down>, the shared
// experts `block`shared_experts.<gate_proj|up_proj|down_proj>.
// GPT-OSS and Llama-4 stack the routed experts: one `block`experts.`gate` tensor holds every
// expert's gate and up, one `block`experts.`down` every down projection (`up` is unused).
struct MoeTensorNames {
  enum class Experts {
    PerExpert,          // `block`experts.E.<gate|up|down>, each [out, in]
    StackedInterleaved, // GPT-OSS: MXFP4 [E, 2I, H] with gate rows at even, up rows at odd indices; [E, H, I]
    StackedTransposed,  // Llama-4: plain [E, H, 2I] (x @ W) with gate in the first I columns; [E, I, H]
  };
  std::string block = "mlp.";                                  // Mixtral: "block_sparse_moe."; Llama-4: "feed_forward."
  std::string router = "gate";                                 // GPT-OSS, Llama-4: "router"
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // Mixtral: w1, w3, w2
  std::string shared = "shared_experts.";                      // Llama-4: "shared_expert."
  Experts experts = Experts::PerExpert;
};

struct MoeConfig {
  enum class Routing {
    SigmoidGroupedTopk,  // DeepSeek noaux_tc (also GLM-4.5): sigmoid, bias for selection, group-limited top-k
    SoftmaxTopk,         // Qwen3-MoE, Mixtral (renormalised)
    TopkSoftmax,         // GPT-OSS: the top-k of the logits, softmax over those k
    TopkSigmoid,         // Llama-4: the top-k of the logits, the sigmoid of each
  };
  Routing routing = Routing::SoftmaxTopk;
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate_size = 0;  // moe_intermediate_size
  int64_t num_shared_experts = 0;        // one shared MLP of num_shared * moe_intermediate_size
  int64_t n_group = 1, topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  bool score_bias = false;   // e_score_correction_bias present
  bool router_bias = false;  // the router Linear has a bias (GPT-OSS)
  bool expert_bias = false;  // the routed experts' projections have biases (GPT-OSS)
  // Llama-4: the routing weight scales the expert's input (bf16(h * w)), its output is summed
  // unweighted; every other family weights the output.
  bool weight_input = false;
  MoeTensorNames names;
};

// The MLPs' gated activation, out = act(gate) * up: SiLU (SwiGLU) or gelu_pytorch_tanh (GeGLU);
// or GPT-OSS's clamped SwiGLU, g = min(gate, limit), u = clamp(up, -limit, limit),
// out = g * sigmoid(alpha * g) * (u + 1).
struct GatedActivation {
  enum class Kind { Silu, GeluTanh, ClampedSwiglu };
  Kind kind = Kind::Silu;
  float alpha = 0, limit = 0;  // ClampedSwiglu (GPT-OSS: swiglu_alpha 1.702, swiglu_limit 7)
};

// One decoder layer as config.json describes it: its position encoding, its attention mask and
// whether its FFN is MoE.
struct LayerConfig {
  // The layer's RoPE: the model's, except Gemma-3's sliding layers (rope_local_base_freq);
  // nullopt: a NoPE layer (Llama-4).
  std::optional<RopeConfig> rope;
  int64_t window = 0;  // sliding window: a query sees its last `window` keys (itself included); 0 = none
  // Llama-4's chunked attention: a query sees only the keys of its own chunk of this many positions
  // (position / chunk equal); 0 = none.
  int64_t chunk = 0;
  bool moe = false;  // the FFN is MoE (ModelConfig::moe), else dense
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP layers
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // GQA's; 0 under MLA, whose head dims are in `mla`
  // The leading dims of each head's rotated part that RoPE rotates (rotate_half or pairs within
  // them; the rest pass through). GQA: head_dim, or head_dim * partial_rotary_factor (GLM-4.5);
  // MLA: mla->qk_rope_head_dim, all of each head's rope part.
  int64_t rotary_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;  // the model's; each layer's own is in `layers`
  std::vector<LayerConfig> layers;  // [num_layers]
  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // Qwen2: q/k/v biases; Llama attention_bias: q/k/v/o
  bool o_bias = false;
  bool mlp_bias = false;   // Llama mlp_bias
  bool qk_norm = false;    // Qwen3, GLM-4.5 use_qk_norm: per-head RMSNorm on q and k before RoPE
  bool rope_interleave = false;  // GQA RoPE on pairs (x[2i], x[2i+1]) (Llama-4's complex rotation)
  std::string ffn_block = "mlp.";  // a dense layer's MLP under the layer's prefix (Llama-4: "feed_forward.")
  // GPT-OSS: self_attn.sinks [heads], one logit per head that joins each row's softmax (and takes
  // probability mass, attending to nothing).
  bool attention_sinks = false;
  // NoPE layers' queries are scaled by log1p(floor((position + 1) / floor_scale)) * attn_scale + 1
  // when attn_temperature_tuning (Llama-4).
  struct Temperature {
    bool on = false;
    double floor_scale = 8192, attn_scale = 0.1;
  } nope_temperature;
  // Llama-4's use_qk_norm: q and k of the RoPE layers divided by their RMS (no weight, eps
  // rms_norm_eps) after RoPE.
  bool qk_l2_norm = false;
  // GQA scores are scaled by query_pre_attn_scalar^-0.5 when set (Gemma-3), else head_dim^-0.5.
  double query_pre_attn_scalar = 0;
  // Norms and activations (Gemma-3 differs in each): every RMSNorm weight w is applied as
  // (norm_weight_offset + w); with sandwich_norms the attention and FFN outputs are normed
  // (post_attention_layernorm, post_feedforward_layernorm) before their residual adds, and the FFN
  // reads pre_feedforward_layernorm's output; the dense MLP's gate activation; the embedding's
  // output is multiplied by embed_scale.
  float norm_weight_offset = 0;
  bool sandwich_norms = false;
  GatedActivation activation;  // every MLP's, dense and experts
  float embed_scale = 1;
  DType torch_dtype = DType::F32;

  std::optional<MlaConfig> mla;   // set: every layer's attention is MLA, else GQA
  std::optional<MoeConfig> moe;   // set: the layers marked `moe` in `layers` are MoE
  std::string tensor_prefix = "model.";  // "language_model.model." for the multimodal wrappers
  // A multimodal wrapper's media token (Kimi-K2.5's media_placeholder_token_id, Llama-4's and
  // Gemma-3's image_token_index): samples holding it are refused.
  int64_t media_placeholder_token_id = -1;
  QuantConfig quant;

  // GQA's q_proj and k_proj/v_proj output widths (0 under MLA).
  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  bool is_moe_layer(int64_t i) const { return moe && layers[std::size_t(i)].moe; }
  // The GQA softmax scale, in float as transformers' eager attention applies it (MLA's is
  // MlaConfig::softmax_scale).
  float attention_scale() const;
};

// Parses and validates config.json; errors name the file and the key.
ModelConfig load_model_config(const std::string& config_json_path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source_name);

}  // namespace layertap

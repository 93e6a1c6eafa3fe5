// Internal to libs/model: the pieces every architecture's forward graph is made of
// (llama.cpp llm_graph_context: build_norm, build_qkv, build_attn, build_ffn, ...).
// Shapes are ggml order: activations are [n_embd, n_tokens].
#pragma once
#include <cstdint>
#include <initializer_list>

#include "libs/model/model.h"

namespace herd::model {

enum class NormType { kLayer, kRms };          // LLM_NORM (ggml_norm), LLM_NORM_RMS (ggml_rms_norm)
enum class FfnAct { kGelu, kGeluErf, kSilu };  // LLM_FFN_GELU (ggml's F16-table GELU), LLM_FFN_GELU_ERF, LLM_FFN_SILU
enum class FfnGate {
  kNone,     // LLM_FFN_SEQ without gate: down(act(up(x)))
  kPar,      // LLM_FFN_PAR: down(act(gate(x)) * up(x))
  kFusedUp,  // LLM_FFN_SWIGLU/GEGLU on a fused ffn_up of 2*n_ff rows, gate half first (phi3)
};

/// Q, K, V of one layer: [head_dim, heads, n_tokens], possibly strided views of a fused
/// QKV product.
struct Qkv {
  Tensor* q;
  Tensor* k;
  Tensor* v;
};

class GraphBuilder {
 public:
  GraphBuilder(const Model& m, Graph& g, const ForwardInputs& in);

  const Hparams& hp;
  const Weights& w;
  Graph& g;
  const ForwardInputs& in;
  const int64_t n_tokens;

  /// Layer il's weights.
  const Layer& layer(int64_t il) const { return w.layers[static_cast<size_t>(il)]; }
  /// 1 / sqrt(n_embd_head_k): the usual attention scale.
  float KqScale() const;
  /// Token embeddings, F32 [n_embd, n_tokens] (build_inp_embd).
  Tensor* InpEmbd();
  /// Norm over ne[0] of `x` (eps from hparams by type), times `weight` and plus `bias`
  /// when given (build_norm).
  Tensor* Norm(Tensor* x, Tensor* weight, Tensor* bias, NormType type);
  /// Q/K/V projections (build_qkv): fused wqkv (+bqkv) split into views, or separate
  /// wq/wk/wv (+biases); clamped to +-f_clamp_kqv when that is > 0.
  Qkv Project(const Layer& L, Tensor* cur);
  /// ggml_rope_ext with the model's rope type and parameters; `x` returned as is for
  /// kRopeNone. `freq_factors` optional [n_rot/2].
  Tensor* Rope(Tensor* x, Tensor* freq_factors = nullptr);
  /// Rope on qkv.q and qkv.k.
  void RopeQk(Qkv& qkv, Tensor* freq_factors = nullptr);
  /// Attention of layer il (build_attn): writes K/V rows in.kv_idx of the layer's cache,
  /// attends over cells [0, n_kv) with the mask (ALiBi when hparams use it), then wo (+bo).
  /// Returns F32 [n_embd, n_tokens].
  Tensor* Attention(int64_t il, Tensor* wo, Tensor* bo, const Qkv& qkv, float kq_scale);
  /// Feed-forward (build_ffn); biases of L are added where present.
  Tensor* Ffn(Tensor* cur, const Layer& L, FfnAct act, FfnGate gate);
  /// Whether the pass keeps fewer rows than tokens (in.out_ids).
  bool SelectsOutputs() const;
  /// GetRows(x, in.out_ids) when SelectsOutputs(), else x (done in the last layer, as
  /// llama.cpp does with inp_out_ids).
  Tensor* Outputs(Tensor* x);
  /// In the last layer (il == n_layer - 1) replaces every *x of `xs` by Outputs(*x);
  /// nothing in the others.
  void LastLayerOutputs(int64_t il, std::initializer_list<Tensor**> xs);
  /// The pre-norm FFN sub-block and both residuals: h = attn_out + inp; returns
  /// h + Ffn(Norm(h, L.ffn_norm, L.ffn_norm_b)).
  Tensor* FfnResidual(Tensor* attn_out, Tensor* inp, const Layer& L, NormType norm, FfnAct act, FfnGate gate);
  /// Final norm (output_norm + output_norm_b), output matrix, output_b; marks the result
  /// as the graph output "result_output". F32 [n_vocab, n_outputs]. With in.embeddings
  /// stops after the norm: the graph output "result_embd", F32 [n_embd, n_outputs]
  /// (llama.cpp res->t_embd).
  Tensor* Logits(Tensor* x, NormType type);

 private:
  /// [n, n_tokens] rows of a [hd, heads, n_tokens] tensor (a view when possible).
  Tensor* Rows(Tensor* x);
};

}  // namespace herd::model

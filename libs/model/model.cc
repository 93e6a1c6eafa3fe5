#include "libs/model/model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/status_macros.h"
#include "libs/model/arch.h"

namespace herd::model {
namespace {

std::string ShapeString(const int64_t* ne, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) absl::StrAppend(&s, i ? ", " : "", ne[i]);
  return s + "]";
}

}  // namespace

// ---------------------------------------------------------------------------
// Registry

const std::vector<ArchDef>& Registry() {
  static const std::vector<ArchDef>* defs = [] {
    auto* v = new std::vector<ArchDef>{
        {"baichuan", &LoadBaichuan, &BuildBaichuan},
        {"bloom", &LoadBloom, &BuildBloom},
        {"falcon", &LoadFalcon, &BuildFalcon},
        {"gemma", &LoadGemma, &BuildGemma},
        {"gpt2", &LoadGpt2, &BuildGpt2},
        {"gptneox", &LoadGptneox, &BuildGptneox},
        {"llama", &LoadLlama, &BuildLlama},
        {"mpt", &LoadMpt, &BuildMpt},
        {"phi2", &LoadPhi2, &BuildPhi2},
        {"phi3", &LoadPhi3, &BuildPhi3},
        {"qwen2", &LoadQwen2, &BuildQwen2},
        {"qwen3", &LoadQwen3, &BuildQwen3},
        {"refact", &LoadRefact, &BuildRefact},
        {"stablelm", &LoadStablelm, &BuildStablelm},
        {"starcoder", &LoadStarcoder, &BuildStarcoder},
    };
    std::sort(v->begin(), v->end(),
              [](const ArchDef& a, const ArchDef& b) { return std::string(a.name) < std::string(b.name); });
    return v;
  }();
  return *defs;
}

const ArchDef* FindArch(absl::string_view name) {
  for (const ArchDef& d : Registry()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Loader

std::string Loader::Key(absl::string_view suffix) const { return absl::StrCat(m_->hp_.arch, ".", suffix); }

absl::Status Loader::Invalid(absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat(file().path(), ": ", msg));
}

absl::Status Loader::ReqInt(absl::string_view suffix, int64_t* out) {
  const std::string key = Key(suffix);
  if (file().Find(key) == nullptr) {
    return absl::NotFoundError(absl::StrCat(file().path(), ": missing required key '", key, "'"));
  }
  HERD_ASSIGN_OR_RETURN(auto v, file().GetInt(key));
  if (v < 1 || v > (int64_t{1} << 40)) {
    return Invalid(absl::StrCat("key '", key, "' = ", v, " is out of range (must be positive)"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status Loader::OptInt(absl::string_view suffix, int64_t* out) {
  if (file().Find(Key(suffix)) == nullptr) return absl::OkStatus();
  return ReqInt(suffix, out);
}

absl::Status Loader::ReqFloat(absl::string_view suffix, float* out) {
  const std::string key = Key(suffix);
  if (file().Find(key) == nullptr) {
    return absl::NotFoundError(absl::StrCat(file().path(), ": missing required key '", key, "'"));
  }
  HERD_ASSIGN_OR_RETURN(auto v, file().GetFloat(key));
  if (!std::isfinite(v)) return Invalid(absl::StrCat("key '", key, "' = ", v, " is not finite"));
  *out = v;
  return absl::OkStatus();
}

absl::Status Loader::OptFloat(absl::string_view suffix, float* out) {
  if (file().Find(Key(suffix)) == nullptr) return absl::OkStatus();
  return ReqFloat(suffix, out);
}

absl::Status Loader::ReqBool(absl::string_view suffix, bool* out) {
  const std::string key = Key(suffix);
  if (file().Find(key) == nullptr) {
    return absl::NotFoundError(absl::StrCat(file().path(), ": missing required key '", key, "'"));
  }
  HERD_ASSIGN_OR_RETURN(*out, file().GetBool(key));
  return absl::OkStatus();
}

absl::Status Loader::CommonHparams() {
  Hparams& hp = m_->hp_;
  HERD_RETURN_IF_ERROR(ReqInt("context_length", &hp.n_ctx_train));
  HERD_RETURN_IF_ERROR(ReqInt("embedding_length", &hp.n_embd));
  HERD_RETURN_IF_ERROR(ReqInt("block_count", &hp.n_layer));
  HERD_RETURN_IF_ERROR(ReqInt("feed_forward_length", &hp.n_ff));
  HERD_RETURN_IF_ERROR(ReqInt("attention.head_count", &hp.n_head));
  hp.n_head_kv = hp.n_head;
  HERD_RETURN_IF_ERROR(OptInt("attention.head_count_kv", &hp.n_head_kv));
  if (hp.n_head % hp.n_head_kv != 0) {
    return Invalid(absl::StrCat("head_count ", hp.n_head, " is not a multiple of head_count_kv ", hp.n_head_kv));
  }
  const bool has_k = file().Find(Key("attention.key_length")) != nullptr;
  const bool has_v = file().Find(Key("attention.value_length")) != nullptr;
  if ((!has_k || !has_v) && hp.n_embd % hp.n_head != 0) {
    return Invalid(absl::StrCat("embedding_length ", hp.n_embd, " is not a multiple of head_count ", hp.n_head,
                                " (and attention.key_length / value_length are not given)"));
  }
  hp.n_embd_head_k = hp.n_embd / hp.n_head;
  hp.n_embd_head_v = hp.n_embd_head_k;
  HERD_RETURN_IF_ERROR(OptInt("attention.key_length", &hp.n_embd_head_k));
  HERD_RETURN_IF_ERROR(OptInt("attention.value_length", &hp.n_embd_head_v));
  hp.n_rot = hp.n_embd_head_k;
  HERD_RETURN_IF_ERROR(OptInt("rope.dimension_count", &hp.n_rot));
  if (hp.rope_type != kRopeNone && (hp.n_rot > hp.n_embd_head_k || hp.n_rot % 2 != 0)) {
    return Invalid(
        absl::StrCat("rope.dimension_count ", hp.n_rot, " must be even and at most the head size ", hp.n_embd_head_k));
  }
  HERD_RETURN_IF_ERROR(OptFloat("rope.freq_base", &hp.rope_freq_base));
  float scaling = 0.0f;
  HERD_RETURN_IF_ERROR(OptFloat("rope.scaling.factor", &scaling));
  if (file().Find(Key("rope.scaling.type")) != nullptr) {
    HERD_ASSIGN_OR_RETURN(auto type, file().GetString(Key("rope.scaling.type")));
    if (type != "linear" && type != "none") {
      return Invalid(
          absl::StrCat("key '", Key("rope.scaling.type"), "' = '", type, "' is not supported (linear, none)"));
    }
    if (type == "none") scaling = 0.0f;
  }
  if (scaling > 0.0f) hp.rope_freq_scale = 1.0f / scaling;

  const gguf::TensorInfo* emb = file().FindTensor("token_embd.weight");
  if (emb == nullptr) return absl::NotFoundError(absl::StrCat(file().path(), ": missing tensor 'token_embd.weight'"));
  hp.n_vocab = emb->ne[1];
  return absl::OkStatus();
}

absl::Status Loader::SameHeadSizes() {
  const Hparams& hp = m_->hp_;
  if (hp.n_embd_head_k == hp.n_embd_head_v) return absl::OkStatus();
  return Invalid(absl::StrCat(hp.arch, " needs equal K and V head sizes: key '", Key("attention.key_length"), "' (",
                              hp.n_embd_head_k, ") vs key '", Key("attention.value_length"), "' (", hp.n_embd_head_v,
                              "); absent keys default to embedding_length / head_count"));
}

absl::Status Loader::RopeCoversHead() {
  const Hparams& hp = m_->hp_;
  if (hp.n_rot == hp.n_embd_head_k) return absl::OkStatus();
  return Invalid(absl::StrCat("key '", Key("rope.dimension_count"), "' = ", hp.n_rot, " must equal the head size ",
                              hp.n_embd_head_k, " for ", hp.arch));
}

absl::Status Loader::Get(const std::string& name, std::vector<int64_t> ne, Need need, Tensor** out) {
  *out = nullptr;
  if (need == kSkip) return absl::OkStatus();
  const gguf::TensorInfo* ti = file().FindTensor(name);
  if (ti == nullptr) {
    if (need == kOptional) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat(file().path(), ": missing tensor '", name, "'"));
  }
  bool ok = true;
  for (size_t i = 0; i < 4; ++i) {
    const int64_t want = i < ne.size() ? ne[i] : 1;
    if (ti->ne[i] != want) ok = false;
  }
  if (!ok) {
    return Invalid(absl::StrCat("tensor '", name, "' has shape ", ShapeString(ti->ne, static_cast<int>(ti->n_dims)),
                                ", expected ", ShapeString(ne.data(), static_cast<int>(ne.size()))));
  }
  Tensor* t = m_->weights_graph_.NewTensor(ti->type, ne, name);
  t->data = const_cast<uint8_t*>(ti->data);
  m_->weight_bytes_ += ti->nbytes;
  *out = t;
  return absl::OkStatus();
}

absl::Status Loader::GetL(int64_t il, const std::string& name, std::vector<int64_t> ne, Need need, Tensor** out) {
  return Get(absl::StrCat("blk.", il, ".", name), std::move(ne), need, out);
}

absl::Status Loader::CommonHparams(int rope_type, bool rms_norm) {
  Hparams& hp = m_->hp_;
  hp.rope_type = rope_type;
  HERD_RETURN_IF_ERROR(CommonHparams());
  if (rms_norm) return ReqFloat("attention.layer_norm_rms_epsilon", &hp.f_norm_rms_eps);
  return ReqFloat("attention.layer_norm_epsilon", &hp.f_norm_eps);
}

absl::Status Loader::AttnNorm(int64_t il, Layer& L, Need bias) {
  const int64_t n_embd = m_->hp_.n_embd;
  HERD_RETURN_IF_ERROR(GetL(il, "attn_norm.weight", {n_embd}, kRequired, &L.attn_norm));
  return GetL(il, "attn_norm.bias", {n_embd}, bias, &L.attn_norm_b);
}

absl::Status Loader::SeparateQkv(int64_t il, Layer& L) {
  const Hparams& hp = m_->hp_;
  const int64_t n_embd = hp.n_embd;
  HERD_RETURN_IF_ERROR(GetL(il, "attn_q.weight", {n_embd, hp.n_embd_head_k * hp.n_head}, kRequired, &L.wq));
  HERD_RETURN_IF_ERROR(GetL(il, "attn_k.weight", {n_embd, hp.n_embd_k_gqa()}, kRequired, &L.wk));
  return GetL(il, "attn_v.weight", {n_embd, hp.n_embd_v_gqa()}, kRequired, &L.wv);
}

absl::Status Loader::QkvBiases(int64_t il, Layer& L, Need need) {
  const Hparams& hp = m_->hp_;
  HERD_RETURN_IF_ERROR(GetL(il, "attn_q.bias", {hp.n_embd_head_k * hp.n_head}, need, &L.bq));
  HERD_RETURN_IF_ERROR(GetL(il, "attn_k.bias", {hp.n_embd_k_gqa()}, need, &L.bk));
  return GetL(il, "attn_v.bias", {hp.n_embd_v_gqa()}, need, &L.bv);
}

absl::Status Loader::AttnOutput(int64_t il, Layer& L) {
  const Hparams& hp = m_->hp_;
  return GetL(il, "attn_output.weight", {hp.n_embd_head_v * hp.n_head, hp.n_embd}, kRequired, &L.wo);
}

absl::Status Loader::GatedFfn(int64_t il, Layer& L) {
  const int64_t n_embd = m_->hp_.n_embd, n_ff = m_->hp_.n_ff;
  HERD_RETURN_IF_ERROR(GetL(il, "ffn_gate.weight", {n_embd, n_ff}, kRequired, &L.ffn_gate));
  HERD_RETURN_IF_ERROR(GetL(il, "ffn_up.weight", {n_embd, n_ff}, kRequired, &L.ffn_up));
  return GetL(il, "ffn_down.weight", {n_ff, n_embd}, kRequired, &L.ffn_down);
}

absl::Status Loader::BiasedFusedQkvLayers() {
  const Hparams& hp = m_->hp_;
  Weights& w = m_->w_;
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  const int64_t n_q = hp.n_embd_head_k * hp.n_head, n_qkv = n_q + 2 * hp.n_embd_k_gqa();
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  const Loader::Need req = Loader::kRequired;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(AttnNorm(il, L, req));
    HERD_RETURN_IF_ERROR(GetL(il, "attn_qkv.weight", {n_embd, n_qkv}, req, &L.wqkv));
    HERD_RETURN_IF_ERROR(GetL(il, "attn_qkv.bias", {n_qkv}, req, &L.bqkv));
    HERD_RETURN_IF_ERROR(GetL(il, "attn_output.weight", {n_q, n_embd}, req, &L.wo));
    HERD_RETURN_IF_ERROR(GetL(il, "attn_output.bias", {n_embd}, req, &L.bo));
    HERD_RETURN_IF_ERROR(GetL(il, "ffn_norm.weight", {n_embd}, req, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(GetL(il, "ffn_norm.bias", {n_embd}, req, &L.ffn_norm_b));
    HERD_RETURN_IF_ERROR(GetL(il, "ffn_up.weight", {n_embd, n_ff}, req, &L.ffn_up));
    HERD_RETURN_IF_ERROR(GetL(il, "ffn_up.bias", {n_ff}, req, &L.ffn_up_b));
    HERD_RETURN_IF_ERROR(GetL(il, "ffn_down.weight", {n_ff, n_embd}, req, &L.ffn_down));
    HERD_RETURN_IF_ERROR(GetL(il, "ffn_down.bias", {n_embd}, req, &L.ffn_down_b));
  }
  return absl::OkStatus();
}

absl::Status Loader::TokEmbd() {
  return Get("token_embd.weight", {m_->hp_.n_embd, m_->hp_.n_vocab}, kRequired, &m_->w_.tok_embd);
}

absl::Status Loader::Output(Need norm_bias, Need output) {
  Weights& w = m_->w_;
  const int64_t n_embd = m_->hp_.n_embd;
  HERD_RETURN_IF_ERROR(Get("output_norm.weight", {n_embd}, kRequired, &w.output_norm));
  HERD_RETURN_IF_ERROR(Get("output_norm.bias", {n_embd}, norm_bias, &w.output_norm_b));
  HERD_RETURN_IF_ERROR(Get("output.weight", {n_embd, m_->hp_.n_vocab}, output, &w.output));
  if (w.output == nullptr) w.output = w.tok_embd;  // tied embeddings
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Model

Model::~Model() = default;

std::vector<std::string> Model::SupportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchDef& d : Registry()) names.emplace_back(d.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(path));
  return FromGguf(std::move(file));
}

absl::StatusOr<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<gguf::GgufFile> file) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  if (m->file_->Find("general.architecture") == nullptr) {
    return absl::NotFoundError(absl::StrCat(m->file_->path(), ": missing required key 'general.architecture'"));
  }
  HERD_ASSIGN_OR_RETURN(auto arch, m->file_->GetString("general.architecture"));
  const ArchDef* def = FindArch(arch);
  if (def == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(m->file_->path(), ": unsupported architecture '", arch,
                                                   "' (supported: ", absl::StrJoin(SupportedArchitectures(), ", "),
                                                   ")"));
  }
  m->hp_.arch = arch;
  m->arch_ = def;
  Loader ld(m.get());
  HERD_RETURN_IF_ERROR(def->load(ld));
  if (static_cast<int64_t>(m->w_.layers.size()) != m->hp_.n_layer) {
    return absl::InternalError(absl::StrCat(m->file_->path(), ": ", arch, " loader left ", m->w_.layers.size(), " of ",
                                            m->hp_.n_layer, " layers"));
  }
  return m;
}

Tensor* Model::BuildForward(Graph& g, const ForwardInputs& in) const {
  return static_cast<const ArchDef*>(arch_)->build(*this, g, in);
}

int64_t LayerOfTensor(const std::string& name, int64_t n_layer) {
  if (absl::StartsWith(name, "blk.")) {
    const size_t dot = name.find('.', 4);
    int64_t il = 0;
    if (dot != std::string::npos && absl::SimpleAtoi(absl::string_view(name).substr(4, dot - 4), &il) && il >= 0 &&
        il < n_layer) {
      return il;
    }
  }
  if (absl::StartsWith(name, "tok") || absl::StartsWith(name, "pos")) return -1;
  return n_layer;
}

std::vector<const BufferType*> Model::weights_buffer_types() const {
  std::vector<const BufferType*> out;
  for (const auto& b : weights_buffers_) out.push_back(b->type());
  return out;
}

absl::Status Model::PlaceWeights(Backend* backend) {
  const std::vector<Tensor*>& leaves = weights_graph_.leaves();
  std::vector<BufferType*> buft_of(leaves.size());
  std::vector<BufferType*> types;  // distinct, in the order of the first weight in each
  for (size_t i = 0; i < leaves.size(); ++i) {
    buft_of[i] = backend->layer_buffer_type(LayerOfTensor(leaves[i]->name, hp_.n_layer), hp_.n_layer);
    if (std::find(types.begin(), types.end(), buft_of[i]) == types.end()) types.push_back(buft_of[i]);
  }
  if (!weights_buffers_.empty()) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      const BufferType* have = leaves[i]->buffer != nullptr ? leaves[i]->buffer->type() : nullptr;
      if (have != buft_of[i]) {
        return absl::FailedPreconditionError(
            absl::StrCat("the weights of ", file_->path(), " are already placed: '", leaves[i]->name, "' is in ",
                         have != nullptr ? have->name() : "the file mapping", " memory, not ", buft_of[i]->name()));
      }
    }
    return backend->PrepareWeights(leaves);
  }
  if (leaves.empty()) return absl::OkStatus();
  std::vector<void*> host(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) host[i] = leaves[i]->data;
  auto restore = [&] {  // on failure every weight stays in the mapping
    for (size_t i = 0; i < leaves.size(); ++i) {
      leaves[i]->buffer = nullptr;
      leaves[i]->data = host[i];
    }
  };
  std::vector<std::unique_ptr<Buffer>> bufs;
  for (BufferType* buft : types) {
    std::vector<size_t> group;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (buft_of[i] == buft) group.push_back(i);
    }
    if (buft->is_host()) {
      // One buffer over the span of the mapping that holds the group's weights.
      const uint8_t* lo = nullptr;
      const uint8_t* hi = nullptr;
      for (size_t i : group) {
        const uint8_t* p = static_cast<const uint8_t*>(host[i]);
        if (lo == nullptr || p < lo) lo = p;
        if (hi == nullptr || p + leaves[i]->nbytes() > hi) hi = p + leaves[i]->nbytes();
      }
      absl::StatusOr<std::unique_ptr<Buffer>> b =
          buft->FromHostPtr(const_cast<uint8_t*>(lo), static_cast<size_t>(hi - lo));
      if (!b.ok()) {
        restore();
        return b.status();
      }
      for (size_t i : group) leaves[i]->buffer = b->get();
      bufs.push_back(*std::move(b));
      continue;
    }
    const size_t align = buft->alignment();
    size_t total = 0;
    for (size_t i : group) total += (leaves[i]->nbytes() + align - 1) / align * align;
    absl::StatusOr<std::unique_ptr<Buffer>> b = buft->Allocate(total);
    if (!b.ok()) {
      restore();
      return absl::Status(b.status().code(), absl::StrCat("weights of ", file_->path(), " (", total, " bytes) in ",
                                                          buft->name(), " memory: ", b.status().message()));
    }
    std::unique_ptr<Buffer> buf = *std::move(b);
    size_t offset = 0;
    for (size_t i : group) {
      Tensor* t = leaves[i];
      absl::Status s = PlaceTensor(t, buf.get(), offset);
      if (s.ok()) s = backend->SetTensor(t, host[i], 0, t->nbytes());
      if (!s.ok()) {
        restore();
        return s;
      }
      offset += (t->nbytes() + align - 1) / align * align;
    }
    bufs.push_back(std::move(buf));
  }
  if (absl::Status s = backend->Synchronize(); !s.ok()) {
    restore();
    return s;
  }
  weights_buffers_ = std::move(bufs);
  return backend->PrepareWeights(leaves);
}

}  // namespace herd::model

#include "libs/quant/type_rules.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/status_macros.h"
#include "libs/tensor/quants.h"

namespace herd::quant {
namespace {

// llama_ftype values (llama.h).
enum Ftype : uint32_t {
  kAllF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kIQ4_NL = 25,
  kIQ4_XS = 30,
  kBF16 = 32,
};

struct FileTypeEntry {
  const char* name;
  uint32_t ftype;
  GgmlType type;
};

// llama-quantize's QUANT_OPTIONS (the supported subset), canonical names first.
constexpr FileTypeEntry kFileTypes[] = {
    {"Q4_0", kQ4_0, GgmlType::Q4_0},       {"Q4_1", kQ4_1, GgmlType::Q4_1},     {"Q5_0", kQ5_0, GgmlType::Q5_0},
    {"Q5_1", kQ5_1, GgmlType::Q5_1},       {"Q8_0", kQ8_0, GgmlType::Q8_0},     {"Q2_K", kQ2_K, GgmlType::Q2_K},
    {"Q3_K_S", kQ3_K_S, GgmlType::Q3_K},   {"Q3_K_M", kQ3_K_M, GgmlType::Q3_K}, {"Q3_K_L", kQ3_K_L, GgmlType::Q3_K},
    {"Q4_K_S", kQ4_K_S, GgmlType::Q4_K},   {"Q4_K_M", kQ4_K_M, GgmlType::Q4_K}, {"Q5_K_S", kQ5_K_S, GgmlType::Q5_K},
    {"Q5_K_M", kQ5_K_M, GgmlType::Q5_K},   {"Q6_K", kQ6_K, GgmlType::Q6_K},     {"IQ4_NL", kIQ4_NL, GgmlType::IQ4_NL},
    {"IQ4_XS", kIQ4_XS, GgmlType::IQ4_XS}, {"F16", kF16, GgmlType::F16},        {"BF16", kBF16, GgmlType::BF16},
    {"F32", kAllF32, GgmlType::F32},
};
struct Alias {
  const char* name;
  const char* target;
};
constexpr Alias kAliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

FileType ToFileType(const FileTypeEntry& e) { return FileType{e.name, e.ftype, e.type}; }

bool IsQuantized(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16 && t != GgmlType::F64 && t != GgmlType::I8 &&
         t != GgmlType::I16 && t != GgmlType::I32 && t != GgmlType::I64;
}

int64_t BlockSize(GgmlType t) { return GetGgmlTypeTraits(t)->block_size; }
std::string TypeName(GgmlType t) { return GetGgmlTypeTraits(t)->name; }  // ggml's spelling: "q4_K"

// ggml_n_dims: 1 + index of the last dimension > 1.
int NDims(const gguf::TensorInfo& t) {
  for (int i = 3; i >= 1; --i) {
    if (t.ne[i] > 1) return i + 1;
  }
  return 1;
}

enum class Category {
  kTokenEmbd,
  kAttnQ,
  kAttnV,
  kAttnK,
  kAttnQkv,
  kAttnKvB,
  kAttnOutput,
  kFfnUp,
  kFfnGate,
  kFfnDown,
  kOutput,
  kOther
};

bool Has(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// tensor_get_category.
Category GetCategory(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (Has(name, "attn_qkv.weight")) return Category::kAttnQkv;
  if (Has(name, "attn_kv_b.weight")) return Category::kAttnKvB;
  if (Has(name, "attn_v.weight")) return Category::kAttnV;
  if (Has(name, "attn_k.weight")) return Category::kAttnK;
  if (Has(name, "attn_q.weight")) return Category::kAttnQ;
  if (Has(name, "attn_output.weight")) return Category::kAttnOutput;
  if (Has(name, "ffn_up")) return Category::kFfnUp;
  if (Has(name, "ffn_gate")) return Category::kFfnGate;
  if (Has(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

bool IsAttnV(Category c) { return c == Category::kAttnV || c == Category::kAttnQkv || c == Category::kAttnKvB; }

// tensor_allows_quantization (quantize_output_tensor = true, only_copy = false).
bool AllowsQuantization(const gguf::TensorInfo& t) {
  if (NDims(t) < 2) return false;
  const std::string& name = t.name;
  bool q = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
  static const char* const kNever[] = {"_norm.weight",
                                       "ffn_gate_inp.weight",
                                       "ffn_gate_tid2eid.weight",
                                       "altup",
                                       "laurel",
                                       "per_layer_model_proj",
                                       "ssm_conv1d",
                                       "shortconv.conv.weight",
                                       "indexer.k_proj.weight",
                                       "indexer.q_proj.weight",
                                       "time_mix_first.weight",
                                       "time_mix_w0.weight",
                                       "time_mix_w1.weight",
                                       "time_mix_w2.weight",
                                       "time_mix_v0.weight",
                                       "time_mix_v1.weight",
                                       "time_mix_v2.weight",
                                       "time_mix_a0.weight",
                                       "time_mix_a1.weight",
                                       "time_mix_a2.weight",
                                       "time_mix_g1.weight",
                                       "time_mix_g2.weight",
                                       "time_mix_decay_w1.weight",
                                       "time_mix_decay_w2.weight",
                                       "time_mix_lerp_fused.weight",
                                       "attn_rel_b.weight",
                                       ".position_embd",
                                       "sam.pos_embd",
                                       "sam.neck.",
                                       "sam.net_",
                                       ".rel_pos",
                                       ".patch_embd",
                                       ".patch_merger",
                                       "a.rvq.codebook",
                                       "mm.a.code_embd"};
  for (const char* s : kNever) q = q && !Has(name, s);
  q = q && name != "position_embd.weight" && name != "token_types.weight";
  return q;
}

// sscanf(name, "blk.%d.", &layer) == 1.
bool ParseLayer(const std::string& name, int* layer) {
  if (name.compare(0, 4, "blk.") != 0) return false;
  const char* begin = name.c_str() + 4;
  char* end = nullptr;
  const long v = std::strtol(begin, &end, 10);
  if (end == begin) return false;
  *layer = static_cast<int>(v);
  return true;
}

bool UseMoreBits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

struct State {
  int n_attention_wv = 0;
  int n_ffn_down = 0, n_ffn_gate = 0, n_ffn_up = 0;
  int i_attention_wv = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  bool has_tied_embeddings = true;
};

// layer_info: with experts the layer comes from the name.
absl::Status LayerInfo(const ModelInfo& info, int counter, int n, const std::string& name, int* i_layer, int* n_layer) {
  *i_layer = counter;
  *n_layer = n;
  if (std::max(1, info.n_expert) > 1) {
    if (!ParseLayer(name, i_layer)) {
      return absl::InvalidArgumentError(absl::StrCat("failed to determine the layer of tensor '", name, "'"));
    }
    if (*i_layer < 0 || *i_layer >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad layer ", *i_layer, " for tensor '", name, "': must be in [0, ", n, ")"));
    }
  }
  return absl::OkStatus();
}

// llama_tensor_get_type_impl for the supported file types (no importance matrix).
absl::StatusOr<GgmlType> GetTypeImpl(State& qs, const ModelInfo& info, const TypeOptions& opt, GgmlType new_type,
                                     const gguf::TensorInfo& t, Category cat) {
  const uint32_t ftype = opt.file_type.ftype;
  const bool falcon = info.arch == "falcon";
  const int n_gqa = info.n_gqa();
  if (cat == Category::kOutput || (qs.has_tied_embeddings && cat == Category::kTokenEmbd)) {
    if (opt.has_output_tensor_type) {
      new_type = opt.output_tensor_type;
    } else {
      const int64_t nx = t.ne[0];
      if (falcon || nx % BlockSize(new_type) != 0) {
        new_type = GgmlType::Q8_0;
      } else if (new_type != GgmlType::Q8_0) {
        new_type = GgmlType::Q6_K;
      }
    }
  } else if (cat == Category::kTokenEmbd) {
    if (opt.has_token_embedding_type) new_type = opt.token_embedding_type;
  } else if (IsAttnV(cat)) {
    if (ftype == kQ2_K) {
      new_type = n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    } else if (ftype == kQ3_K_M) {
      new_type = qs.i_attention_wv < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    } else if (ftype == kQ3_K_L) {
      new_type = GgmlType::Q5_K;
    } else if ((ftype == kIQ4_NL || ftype == kIQ4_XS) && n_gqa >= 4) {
      new_type = GgmlType::Q5_K;
    } else if ((ftype == kQ4_K_M || ftype == kQ5_K_M) && UseMoreBits(qs.i_attention_wv, qs.n_attention_wv)) {
      new_type = GgmlType::Q6_K;
    } else if (ftype == kQ4_K_S && qs.i_attention_wv < 4) {
      new_type = GgmlType::Q5_K;
    }
    if (info.is_70b && (new_type == GgmlType::Q3_K || new_type == GgmlType::Q4_K)) new_type = GgmlType::Q5_K;
    if (info.n_expert == 8) new_type = GgmlType::Q8_0;
    ++qs.i_attention_wv;
  } else if (cat == Category::kAttnK) {
    if (info.n_expert == 8) new_type = GgmlType::Q8_0;
  } else if (cat == Category::kAttnQ) {
    // only IQ3 mixtures change attn_q
  } else if (cat == Category::kFfnDown) {
    int i_layer, n_layer;
    HERD_RETURN_IF_ERROR(LayerInfo(info, qs.i_ffn_down, qs.n_ffn_down, t.name, &i_layer, &n_layer));
    if (ftype == kQ2_K) {
      new_type = GgmlType::Q3_K;
    } else if (ftype == kQ3_K_M) {
      new_type = i_layer < n_layer / 16                     ? GgmlType::Q5_K
                 : !falcon || UseMoreBits(i_layer, n_layer) ? GgmlType::Q4_K
                                                            : GgmlType::Q3_K;
    } else if (ftype == kQ3_K_L) {
      new_type = falcon ? GgmlType::Q4_K : GgmlType::Q5_K;
    } else if (ftype == kQ4_K_M) {
      if (falcon) {
        new_type = i_layer < n_layer / 16          ? GgmlType::Q6_K
                   : UseMoreBits(i_layer, n_layer) ? GgmlType::Q5_K
                                                   : GgmlType::Q4_K;
      } else if (UseMoreBits(i_layer, n_layer)) {
        new_type = GgmlType::Q6_K;
      }
    } else if (i_layer < n_layer / 8 && (ftype == kIQ4_NL || ftype == kIQ4_XS)) {  // no imatrix
      new_type = GgmlType::Q5_K;
    } else if (ftype == kQ5_K_M && UseMoreBits(i_layer, n_layer)) {
      new_type = GgmlType::Q6_K;
    } else if (ftype == kQ4_K_S && !falcon && i_layer < n_layer / 8) {
      new_type = GgmlType::Q5_K;
    }
    ++qs.i_ffn_down;
  } else if (cat == Category::kAttnOutput) {
    if (!falcon) {
      if (info.n_expert == 8) {
        if (ftype == kQ2_K || ftype == kQ3_K_S || ftype == kQ3_K_M || ftype == kIQ4_NL || ftype == kQ4_K_S ||
            ftype == kQ4_K_M || ftype == kIQ4_XS) {
          new_type = GgmlType::Q5_K;
        }
      } else {
        if (ftype == kQ2_K)
          new_type = GgmlType::Q3_K;
        else if (ftype == kQ3_K_M)
          new_type = GgmlType::Q4_K;
        else if (ftype == kQ3_K_L)
          new_type = GgmlType::Q5_K;
      }
    } else if (ftype == kQ3_K_L) {
      new_type = GgmlType::Q4_K;
    }
  } else if (cat == Category::kAttnQkv) {
    if (ftype == kQ3_K_M || ftype == kQ3_K_L)
      new_type = GgmlType::Q4_K;
    else if (ftype == kQ4_K_M)
      new_type = GgmlType::Q5_K;
    else if (ftype == kQ5_K_M)
      new_type = GgmlType::Q6_K;
  } else if (cat == Category::kFfnGate || cat == Category::kFfnUp) {
    int& counter = cat == Category::kFfnGate ? qs.i_ffn_gate : qs.i_ffn_up;
    int i_layer, n_layer;
    absl::Status s =
        LayerInfo(info, counter, cat == Category::kFfnGate ? qs.n_ffn_gate : qs.n_ffn_up, t.name, &i_layer, &n_layer);
    if (!s.ok()) return s;
    ++counter;  // only IQ3_XS changes ffn_gate / ffn_up
  }
  return new_type;
}

// tensor_type_fallback.
absl::StatusOr<GgmlType> Fallback(const gguf::TensorInfo& t, GgmlType target, std::string* note) {
  const int64_t ncols = t.ne[0];
  const int64_t qk = BlockSize(target);
  if (ncols % qk == 0) return target;
  GgmlType ret;
  switch (target) {
    case GgmlType::IQ4_XS:
      ret = GgmlType::IQ4_NL;
      break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
      ret = GgmlType::Q4_0;
      break;
    case GgmlType::Q4_K:
      ret = GgmlType::Q5_0;
      break;
    case GgmlType::Q5_K:
      ret = GgmlType::Q5_1;
      break;
    case GgmlType::Q6_K:
      ret = GgmlType::Q8_0;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "': ncols ", ncols, " not divisible by ", qk, " (required for type ",
                       TypeName(target), "): no tensor type fallback is defined for type ", TypeName(target)));
  }
  if (ncols % BlockSize(ret) != 0) ret = GgmlType::F16;  // "must use F16 due to unusual shape"
  *note = absl::StrCat("ncols ", ncols, " not divisible by ", qk, " (required for type ", TypeName(target),
                       ") -> falling back to ", TypeName(ret));
  return ret;
}

}  // namespace

std::vector<std::string> FileTypeNames() {
  std::vector<std::string> v;
  for (const FileTypeEntry& e : kFileTypes) v.emplace_back(e.name);
  for (const Alias& a : kAliases) v.emplace_back(a.name);
  return v;
}

absl::StatusOr<FileType> ParseFileType(const std::string& name) {
  const std::string up = Upper(name);
  for (const FileTypeEntry& e : kFileTypes) {
    if (up == e.name) return ToFileType(e);
  }
  for (const Alias& a : kAliases) {
    if (up == a.name) return ParseFileType(a.target);
  }
  // A numeric llama_ftype, as llama-quantize accepts ("15" = Q4_K_M).
  if (!up.empty() && std::all_of(up.begin(), up.end(), [](char c) { return c >= '0' && c <= '9'; }) && up.size() < 6) {
    const uint32_t v = static_cast<uint32_t>(std::stoul(up));
    for (const FileTypeEntry& e : kFileTypes) {
      if (e.ftype == v) return ToFileType(e);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("type: unsupported quantization type '", name,
                                                 "'; supported: ", absl::StrJoin(FileTypeNames(), ", ")));
}

absl::StatusOr<GgmlType> ParseQuantType(const std::string& name, const std::string& field) {
  GgmlType t;
  if (!ParseGgmlType(name, &t)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": unknown ggml type '", name, "'"));
  }
  if (!CanQuantize(t) || t == GgmlType::Q8_1 || t == GgmlType::Q8_K) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": herd cannot quantize to type ", TypeName(t),
                                                   " (supported: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K "
                                                   "q4_K q5_K q6_K iq4_nl iq4_xs)"));
  }
  return t;
}

absl::StatusOr<TensorTypeOverride> ParseTensorTypeOverride(const std::string& spec, const std::string& field) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": malformed tensor type '", spec, "' (want PATTERN=TYPE)"));
  }
  if (eq == 0) return absl::InvalidArgumentError(absl::StrCat(field, ": missing tensor name in '", spec, "'"));
  if (eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": missing quantization type in '", spec, "'"));
  }
  TensorTypeOverride o;
  o.pattern = Lower(spec.substr(0, eq));
  HERD_ASSIGN_OR_RETURN(o.type, ParseQuantType(spec.substr(eq + 1), field));
  try {
    o.re = std::regex(o.pattern);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": bad pattern '", o.pattern, "': ", e.what()));
  }
  return o;
}

absl::StatusOr<ModelInfo> ReadModelInfo(const gguf::GgufFile& f) {
  ModelInfo info;
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": not a model: ", arch.status().message()));
  }
  info.arch = *arch;
  auto n_layer = f.GetInt(info.arch + ".block_count");
  if (!n_layer.ok()) return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", n_layer.status().message()));
  if (*n_layer <= 0 || *n_layer > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": ", info.arch, ".block_count ", *n_layer, " is out of range"));
  }
  info.n_layer = static_cast<int>(*n_layer);
  auto first_int = [&](const std::string& key, int dflt) -> int {
    const gguf::Value* v = f.Find(key);
    if (v == nullptr) return dflt;
    if (v->type() == gguf::ValueType::ARRAY) return v->array_size() > 0 ? static_cast<int>(v->IntAt(0)) : dflt;
    return v->is_integer() ? static_cast<int>(v->AsInt()) : dflt;
  };
  info.n_head = first_int(info.arch + ".attention.head_count", 0);
  info.n_head_kv = first_int(info.arch + ".attention.head_count_kv", info.n_head);
  info.n_expert = first_int(info.arch + ".expert_count", 0);
  info.is_70b = info.arch == "llama" && info.n_layer == 80 && info.n_head != info.n_head_kv;
  return info;
}

std::vector<const gguf::TensorInfo*> OrderTensors(const gguf::GgufFile& f) {
  std::vector<const gguf::TensorInfo*> v;
  for (const gguf::TensorInfo& t : f.tensors()) v.push_back(&t);
  auto layer = [](const std::string& n) {
    int l = -1;
    if (!ParseLayer(n, &l)) l = -1;
    return l;
  };
  std::sort(v.begin(), v.end(), [&](const gguf::TensorInfo* a, const gguf::TensorInfo* b) {
    const int la = layer(a->name), lb = layer(b->name);
    if (la != lb) return la < lb;
    return a->name < b->name;
  });
  return v;
}

absl::StatusOr<std::vector<TensorPlan>> PlanTensorTypes(const gguf::GgufFile& f, const ModelInfo& info,
                                                        const TypeOptions& opt) {
  const std::vector<const gguf::TensorInfo*> order = OrderTensors(f);
  State qs;
  for (const gguf::TensorInfo* t : order) {  // init_quantize_state_counters
    const Category c = GetCategory(t->name);
    if (IsAttnV(c)) ++qs.n_attention_wv;
    if (c == Category::kOutput) qs.has_tied_embeddings = false;
  }
  qs.n_ffn_down = qs.n_ffn_gate = qs.n_ffn_up = info.n_layer;
  const GgmlType default_type = opt.file_type.default_type;

  std::vector<TensorPlan> plans;
  plans.reserve(order.size());
  for (const gguf::TensorInfo* t : order) {
    TensorPlan p;
    p.src = t;
    p.type = t->type;
    const Category cat = GetCategory(t->name);
    if (AllowsQuantization(*t)) {
      if (opt.has_token_embedding_type && cat == Category::kTokenEmbd) {
        p.type = opt.token_embedding_type;
        p.note = "--token-embedding-type";
      } else if (opt.has_output_tensor_type && cat == Category::kOutput) {
        p.type = opt.output_tensor_type;
        p.note = "--output-tensor-type";
      } else {
        GgmlType new_type = default_type;
        if (IsQuantized(default_type)) {
          bool manual = false;
          for (const TensorTypeOverride& o : opt.overrides) {
            if (std::regex_search(t->name, o.re)) {
              if (o.type != new_type) p.note = absl::StrCat("--tensor-type ", o.pattern, "=", TypeName(o.type));
              new_type = o.type;
              manual = true;
              break;
            }
          }
          if (!manual && !opt.pure) {
            HERD_ASSIGN_OR_RETURN(new_type, GetTypeImpl(qs, info, opt, new_type, *t, cat));
          }
          std::string note;
          HERD_ASSIGN_OR_RETURN(auto fb, Fallback(*t, new_type, &note));
          if (!note.empty()) p.note = note;
          new_type = fb;
        }
        p.type = new_type;
      }
      if (t->ne[0] % BlockSize(p.type) != 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "': row length ", t->ne[0],
                                                       " is not a multiple of ", BlockSize(p.type), " as type ",
                                                       TypeName(p.type), " requires (", p.note, ")"));
      }
    }
    p.quantize = p.type != t->type;
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace herd::quant

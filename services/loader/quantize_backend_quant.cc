// Quantize backed by libs/quant (herd::quant::QuantizeModel). Selected in BUILD
// (target :quantize_backend) once //libs/quant:quant exists.
#include "libs/quant/quantize.h"
#include "services/loader/quantize_backend.h"

namespace herd::loader {

bool QuantizeAvailable() { return true; }

absl::Status RunQuantizeJob(const QuantizeJob& job, const std::function<void(const QuantizeReport&)>& progress,
                            const std::atomic<bool>* cancel) {
  herd::quant::QuantizeOptions o;
  o.type = job.type;
  o.pure = job.pure;
  o.output_tensor_type = job.output_tensor_type;
  o.token_embedding_type = job.token_embedding_type;
  o.tensor_type_overrides = job.tensor_type_overrides;
  o.n_threads = job.n_threads;
  return herd::quant::QuantizeModel(
      job.src_path, job.dst_path, o,
      [&progress](const herd::quant::QuantizeProgress& p) {
        if (!progress) return;
        QuantizeReport r;
        r.tensors_done = p.tensors_done;
        r.tensors_total = p.tensors_total;
        r.bytes_done = p.bytes_done;
        r.bytes_total = p.bytes_total;
        r.elapsed_s = p.elapsed_s;
        r.eta_s = p.eta_s;
        r.current_tensor = p.current_tensor;
        progress(r);
      },
      cancel);
}

}  // namespace herd::loader

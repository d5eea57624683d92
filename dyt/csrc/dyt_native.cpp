// dyt's native host path: the ops `dyt_native::dyt` and `dyt_packed`, their autograd nodes, and the
// kernel launches, in C++.
//
// Steady state runs no Python: the op looks its launches up in a per-shape cache and launches the
// Triton-compiled kernels through the CUDA driver (cuLaunchKernelEx) on PyTorch's current stream. On a
// miss it calls the Python op `dyt_native::fill_forward` / `fill_backward` (dyt/native.py), which runs the
// call through dyt's Python launcher (planning and compiling as usual) and returns the results and the
// launch record of what it launched; an empty record means "do not cache" (the call stays on the Python
// path). The records are plain int64 lists whose format dyt/native.py writes and this file reads
// (docs/host-path.md, "Native path"):
//
//   launch   = function, grid, threads, shared bytes, pdl, n_params, (kind, value) * n_params
//   forward  = launch                                    tensor slots: x y alpha gamma beta
//   backward = finish_rows, partial_width, n_dalpha, launch main, launch finish
//              tensor slots: x dy dx alpha gamma part_dgamma part_dbeta part_dalpha dgamma dbeta dalpha
//
// Invariant: a cached record is valid for exactly the key it is stored under: the device, every dtype (y's too),
// the row layout (M, N, row strides, channel span), beta's presence and the 16-byte alignment of every
// pointer that Triton specializes on. Anything the key does not hold must not change a launch.
//
// No CUDA headers: the few driver types used are declared here (their layout is CUDA 12's ABI), and the
// driver is found with dlopen, so the file builds on machines without a CUDA toolkit (CI compiles and
// tests the parts that need no GPU: record parsing and argument packing).

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace dyt_native {

// Errors are std::runtime_error (RuntimeError in Python; the autograd engine passes them on) with
// messages joined from strings: this file makes no c10::Error and no iostream, which crash a process
// whose PyTorch was built by another compiler than the extension (docs/host-path.md, "Native path").
inline void append(std::string& out, const char* part) { out += part; }
inline void append(std::string& out, const std::string& part) { out += part; }
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
void append(std::string& out, Int part) {
  out += std::to_string(part);
}
inline void append(std::string& out, at::IntArrayRef sizes) {
  out += "(";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  out += ")";
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::string message;
  (append(message, parts), ...);
  throw std::runtime_error(message);
}

#define DYT_CHECK(cond, ...)           \
  do {                                 \
    if (!(cond)) fail(__VA_ARGS__);    \
  } while (0)

// ---- the CUDA driver: types of CUDA 12's cuda.h, symbols found at run time -------------------------

using CUresult = int;
using CUfunction = void*;
using CUstream = void*;

struct LaunchAttribute {  // CUlaunchAttribute
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;
  } value;
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");

struct LaunchConfig {  // CUlaunchConfig
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  CUstream stream;
  LaunchAttribute* attrs;
  unsigned n_attrs;
};

constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION

using LaunchKernelEx = CUresult (*)(const LaunchConfig*, CUfunction, void**, void**);
using GetErrorString = CUresult (*)(CUresult, const char**);

struct Driver {
  LaunchKernelEx launch = nullptr;
  GetErrorString error_string = nullptr;
};

const Driver& driver() {
  static const Driver d = [] {
    Driver found;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    DYT_CHECK(lib != nullptr, "dyt_native: cannot load libcuda.so.1: ", dlerror());
    found.launch = reinterpret_cast<LaunchKernelEx>(dlsym(lib, "cuLaunchKernelEx"));
    found.error_string = reinterpret_cast<GetErrorString>(dlsym(lib, "cuGetErrorString"));
    DYT_CHECK(found.launch != nullptr, "dyt_native: the CUDA driver has no cuLaunchKernelEx (CUDA 12+)");
    return found;
  }();
  return d;
}

CUstream current_stream(const at::Device& device) {
  return static_cast<CUstream>(
      c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle());
}

// ---- launch records -------------------------------------------------------------------------------

enum ParamKind : int64_t { kTensor = 0, kInt32 = 1, kInt64 = 2, kNull = 3 };

struct Param {
  int64_t kind;
  int64_t value;  // the tensor slot, or the integer
};

struct Launch {
  CUfunction function = nullptr;
  unsigned grid = 0, threads = 0, shared = 0;
  bool pdl = false;
  std::vector<Param> params;
};

struct ForwardRecord {
  Launch kernel;
};

struct BackwardRecord {
  int64_t finish_rows = 0, partial_width = 0, n_dalpha = 0;
  Launch main, finish;
};

// Reads one launch from record[at...]; advances at. n_slots bounds the tensor slots.
Launch read_launch(const std::vector<int64_t>& record, size_t& at, int64_t n_slots) {
  DYT_CHECK(record.size() >= at + 6, "dyt_native: launch record too short");
  Launch launch;
  launch.function = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(record[at]));
  auto bounded = [](int64_t v, const char* what) {
    DYT_CHECK(v >= 0 && v <= INT32_MAX, "dyt_native: launch record ", what, " out of range: ", v);
    return static_cast<unsigned>(v);
  };
  launch.grid = bounded(record[at + 1], "grid");
  launch.threads = bounded(record[at + 2], "threads");
  launch.shared = bounded(record[at + 3], "shared bytes");
  launch.pdl = record[at + 4] != 0;
  int64_t n = record[at + 5];
  at += 6;
  DYT_CHECK(n >= 0 && record.size() >= at + 2 * static_cast<size_t>(n),
              "dyt_native: launch record too short for ", n, " parameters");
  for (int64_t i = 0; i < n; ++i, at += 2) {
    Param p{record[at], record[at + 1]};
    DYT_CHECK(p.kind >= kTensor && p.kind <= kNull, "dyt_native: unknown parameter kind ", p.kind);
    DYT_CHECK(p.kind != kTensor || (p.value >= 0 && p.value < n_slots),
                "dyt_native: tensor slot ", p.value, " out of range");
    DYT_CHECK(p.kind != kInt32 || (p.value >= INT32_MIN && p.value <= INT32_MAX),
                "dyt_native: int32 parameter out of range: ", p.value);
    launch.params.push_back(p);
  }
  return launch;
}

constexpr int64_t kForwardSlots = 5;
constexpr int64_t kBackwardSlots = 11;

ForwardRecord read_forward(const std::vector<int64_t>& record) {
  size_t at = 0;
  ForwardRecord r{read_launch(record, at, kForwardSlots)};
  DYT_CHECK(at == record.size(), "dyt_native: forward record has trailing values");
  return r;
}

BackwardRecord read_backward(const std::vector<int64_t>& record) {
  DYT_CHECK(record.size() >= 3, "dyt_native: backward record too short");
  BackwardRecord r;
  r.finish_rows = record[0];
  r.partial_width = record[1];
  r.n_dalpha = record[2];
  constexpr int64_t kMaxPartials = int64_t{1} << 40;  // elements: bounds the scratch's byte arithmetic
  DYT_CHECK(r.finish_rows > 0 && r.partial_width > 0 && r.n_dalpha > 0,
              "dyt_native: backward record's partial shapes must be positive");
  DYT_CHECK(r.finish_rows <= kMaxPartials / r.partial_width && r.n_dalpha <= kMaxPartials,
              "dyt_native: backward record's partial shapes are too large");
  size_t at = 3;
  r.main = read_launch(record, at, kBackwardSlots);
  r.finish = read_launch(record, at, kBackwardSlots);
  DYT_CHECK(at == record.size(), "dyt_native: backward record has trailing values");
  return r;
}

// The 64-bit value each kernel parameter receives (pointers as addresses); packing widens nothing:
// int32 parameters are passed as 4 bytes.
struct Packed {
  std::array<int64_t, 32> values{};
  std::array<int32_t, 32> narrow{};
  std::array<void*, 32> pointers{};
  size_t n = 0;
};

// The address each tensor slot receives (forward: the first kForwardSlots).
using Slots = std::array<void*, kBackwardSlots>;

void pack(const Launch& launch, const Slots& slots, Packed& out) {
  DYT_CHECK(launch.params.size() <= out.values.size(), "dyt_native: too many kernel parameters");
  out.n = launch.params.size();
  for (size_t i = 0; i < out.n; ++i) {
    const Param& p = launch.params[i];
    switch (p.kind) {
      case kTensor:
        out.values[i] = reinterpret_cast<int64_t>(slots[p.value]);
        out.pointers[i] = &out.values[i];
        break;
      case kInt32:
        out.narrow[i] = static_cast<int32_t>(p.value);
        out.values[i] = p.value;
        out.pointers[i] = &out.narrow[i];
        break;
      case kInt64:
        out.values[i] = p.value;
        out.pointers[i] = &out.values[i];
        break;
      default:  // kNull: Triton's scratch pointers, unused by kernels that ask for no scratch
        out.values[i] = 0;
        out.pointers[i] = &out.values[i];
    }
  }
}

void launch_on(const Launch& launch, const Slots& slots, const at::Device& device) {
  Packed packed;
  pack(launch, slots, packed);
  LaunchAttribute pdl{};
  pdl.id = kProgrammaticStreamSerialization;
  pdl.value.value = 1;
  LaunchConfig config{launch.grid, 1, 1, launch.threads, 1, 1, launch.shared, current_stream(device),
                      launch.pdl ? &pdl : nullptr, launch.pdl ? 1u : 0u};
  const Driver& d = driver();
  CUresult rc = d.launch(&config, launch.function, packed.pointers.data(), nullptr);
  if (rc != 0) {
    const char* message = "unknown error";
    if (d.error_string != nullptr) d.error_string(rc, &message);
    fail("dyt_native: kernel launch failed: ", message, " (CUresult ", rc, ")");
  }
}

// ---- the cache ------------------------------------------------------------------------------------

using Key = std::array<int64_t, 12>;

struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

constexpr size_t kMaxEntries = 4096;  // a process with ever-new shapes refills rather than grows

// Records are immutable once stored; a hit shares its record (no copy of its parameter lists), and a
// record stays alive for the call that found it when another thread clears or refills the cache.
template <typename Record>
struct Cache {
  std::mutex lock;
  std::unordered_map<Key, std::shared_ptr<const Record>, KeyHash> entries;

  std::shared_ptr<const Record> find(const Key& key) {
    std::lock_guard<std::mutex> guard(lock);
    auto it = entries.find(key);
    return it == entries.end() ? nullptr : it->second;
  }
  void put(const Key& key, Record record) {
    auto shared = std::make_shared<const Record>(std::move(record));
    std::lock_guard<std::mutex> guard(lock);
    if (entries.size() >= kMaxEntries) entries.clear();
    entries[key] = std::move(shared);
  }
  int64_t size() {
    std::lock_guard<std::mutex> guard(lock);
    return static_cast<int64_t>(entries.size());
  }
  void clear() {
    std::lock_guard<std::mutex> guard(lock);
    entries.clear();
  }
};

Cache<ForwardRecord>& forward_cache() {
  static Cache<ForwardRecord> c;
  return c;
}
Cache<BackwardRecord>& backward_cache() {
  static Cache<BackwardRecord> c;
  return c;
}

// ---- row layouts (dyt/launcher.py's rows_of) ------------------------------------------------------

struct Rows {
  int64_t M, N, stride, span;
};

// A 2-D view with unit column stride, or a contiguous tensor; channels_first: contiguous (n, C, *spatial)
// as n rows of C * L (a 2-D one is plain rows). Anything else is the caller's to make contiguous.
bool row_layout(const at::Tensor& t) {
  return t.is_contiguous() || (t.dim() == 2 && (t.stride(1) == 1 || t.size(1) == 1));
}

Rows rows_of(const at::Tensor& t, bool channels_first) {
  if (t.dim() == 2) return {t.size(0), t.size(1), t.stride(0), 1};
  if (channels_first) {
    int64_t M = t.size(0);
    int64_t N = M ? t.numel() / M : 0;
    return {M, N, N, (N && t.size(1)) ? N / t.size(1) : 1};
  }
  int64_t N = t.size(-1);
  return {N ? t.numel() / N : 0, N, N, 1};
}

int64_t aligned(const at::Tensor& t) {
  return (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16) == 0 ? 1 : 0;
}

int64_t dtype_code(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? static_cast<int64_t>(t->scalar_type()) + 1 : 0;
}

Key forward_key(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                const std::optional<at::Tensor>& beta, bool channels_first, at::ScalarType y_type) {
  Rows r = rows_of(x, channels_first);
  bool has_beta = beta.has_value() && beta->defined();
  int64_t align = aligned(x) | aligned(alpha) << 1 | aligned(gamma) << 2 | (has_beta ? aligned(*beta) << 3 : 0);
  int64_t dtypes = dtype_code(x) | (static_cast<int64_t>(y_type) + 1) << 8;
  return {1, x.device().index(), dtypes, dtype_code(alpha), dtype_code(gamma), dtype_code(beta),
          r.M, r.N, r.stride, r.span, align, channels_first};
}

Key backward_key(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                 const std::optional<at::Tensor>& beta, bool channels_first) {
  Rows r = rows_of(x, channels_first);
  int64_t dy_stride = rows_of(dy, channels_first).stride;
  int64_t align = aligned(x) | aligned(dy) << 1 | aligned(alpha) << 2 | aligned(gamma) << 3;
  int64_t dtypes = dtype_code(x) | dtype_code(dy) << 8 | dtype_code(alpha) << 16 | dtype_code(gamma) << 24 |
                   dtype_code(beta) << 32;
  return {2, x.device().index(), dtypes, r.M, r.N, r.stride, dy_stride, r.span, align, channels_first, 0, 0};
}

at::Tensor output(at::IntArrayRef shape, const at::TensorOptions& options, bool poison) {
  return poison ? at::full(shape, NAN, options) : at::empty(shape, options);
}

// The backward's scratch: the float64 dalpha partials, the float32 dgamma and dbeta partials and,
// without beta, the dbeta the kernels write anyway, at byte offsets that are multiples of kRegionAlign
// (the kernels are compiled for 16-byte-aligned pointers). It lies in dx's block, after dx (see
// backward_cuda). Invariant: the regions do not overlap and each holds what the record's shapes say
// (tests/test_native.py checks the layout).
struct Scratch {
  int64_t part_dalpha, part_dgamma, part_dbeta, dbeta, bytes;  // dbeta: -1 where beta is given
};

constexpr int64_t kRegionAlign = 256;

int64_t round_up(int64_t bytes) { return (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign; }

Scratch scratch_layout(int64_t finish_rows, int64_t partial_width, int64_t n_dalpha, bool has_beta,
                       int64_t dbeta_bytes) {
  int64_t partial = round_up(4 * finish_rows * partial_width);
  Scratch s{0, round_up(8 * n_dalpha), 0, -1, 0};
  s.part_dbeta = s.part_dgamma + partial;
  s.bytes = s.part_dbeta + partial;
  if (!has_beta) {
    s.dbeta = s.bytes;
    s.bytes += round_up(dbeta_bytes);
  }
  return s;
}

// The parameter gradients' block. Unpacked: dalpha at 0, dgamma and (where there is beta) dbeta after
// it, each region on a kRegionAlign boundary. Packed: a packed parameter's layout (dgamma, dbeta where
// there is beta, dalpha; one dtype), region after region with no gap, so the block is that parameter's
// gradient and the kernels write every byte of it (packed_fits says where the regions keep the
// alignment the kernels are compiled for). Invariant as the scratch's.
struct ParamGrads {
  int64_t dalpha, dgamma, dbeta, bytes;  // dbeta: -1 without beta
};

ParamGrads param_grads_layout(int64_t dalpha_bytes, int64_t dgamma_bytes, int64_t dbeta_bytes, bool has_beta,
                              bool packed) {
  if (packed) {
    int64_t dbeta = has_beta ? dgamma_bytes : -1;
    int64_t dalpha = dgamma_bytes + (has_beta ? dbeta_bytes : 0);
    return {dalpha, 0, dbeta, dalpha + dalpha_bytes};
  }
  ParamGrads g{0, round_up(dalpha_bytes), -1, 0};
  g.bytes = g.dgamma + round_up(dgamma_bytes);
  if (has_beta) {
    g.dbeta = g.bytes;
    g.bytes += round_up(dbeta_bytes);
  }
  return g;
}

at::Tensor block(int64_t bytes, const at::TensorOptions& options, bool poison) {
  // poison: all bytes 0xFF, a NaN in every floating dtype dyt returns
  at::TensorOptions bytes_options = options.dtype(at::kByte);
  return poison ? at::full({bytes}, 255, bytes_options) : at::empty({bytes}, bytes_options);
}

// A contiguous tensor of `sizes` and `dtype` over `block`'s storage from byte `offset` (a multiple of
// the dtype's size): no allocation, and not an autograd view, so once `block` itself is gone the tensors
// made over it are all that hold its storage (a lone dx can then be accumulated into in place).
at::Tensor region(const at::Tensor& block, int64_t offset, at::IntArrayRef sizes, at::ScalarType dtype) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(block.storage()),
                                                   block.key_set(), c10::scalarTypeToTypeMeta(dtype));
  impl->set_storage_offset(offset / static_cast<int64_t>(c10::elementSize(dtype)));
  impl->set_sizes_contiguous(sizes);
  return at::Tensor(std::move(impl));
}

// ---- the Python fill ops --------------------------------------------------------------------------

std::tuple<at::Tensor, std::vector<int64_t>> fill_forward(const at::Tensor& x, const at::Tensor& alpha,
                                                          const at::Tensor& gamma,
                                                          const std::optional<at::Tensor>& beta,
                                                          bool channels_first, bool poison,
                                                          at::ScalarType y_type) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dyt_native::fill_forward", "")
                       .typed<std::tuple<at::Tensor, std::vector<int64_t>>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const std::optional<at::Tensor>&, bool, bool, at::ScalarType)>();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(x, alpha, gamma, beta, channels_first, poison, y_type);
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>> fill_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
    const std::optional<at::Tensor>& beta, bool channels_first, bool poison) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dyt_native::fill_backward", "")
                       .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const std::optional<at::Tensor>&, bool, bool)>();
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return op.call(dy, x, alpha, gamma, beta, channels_first, poison);
}

// A backward that builds a graph (create_graph=True) runs dyt.torch_path's differentiable expression,
// the Python op's CompositeImplicitAutograd kernel, so that autograd records it: the kernels' gradients are
// not differentiable again.
Grads differentiable_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& alpha,
                              const at::Tensor& gamma, const std::optional<at::Tensor>& beta,
                              bool channels_first) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dyt_native::differentiable_backward", "")
                       .typed<Grads(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, bool)>();
  return op.call(dy, x, alpha, gamma, beta, channels_first);
}

// ---- forward and backward -------------------------------------------------------------------------

at::Tensor contiguous_param(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

bool supported(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

// Refuses every input that dyt.ops.validate refuses, by plain comparisons. dyt's Python entry calls the
// op without validating first and, where the op refuses, runs validate for dyt's own ValueError or
// TypeError (dyt/ops.py, dyt()); tests/test_native.py holds the two to the same cases.
void check_inputs(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                  const std::optional<at::Tensor>& beta, bool channels_first) {
  bool has_beta = beta.has_value() && beta->defined();
  DYT_CHECK(supported(x.scalar_type()) && supported(alpha.scalar_type()) && supported(gamma.scalar_type()) &&
                (!has_beta || supported(beta->scalar_type())),
            "dyt_native: x, alpha, gamma and beta must be float32, bfloat16 or float16");
  DYT_CHECK(x.dim() >= (channels_first ? 2 : 1), "dyt_native: x has too few dimensions");
  int64_t C = x.size(channels_first ? 1 : x.dim() - 1);
  DYT_CHECK(C >= 1, "dyt_native: x has no channels");
  DYT_CHECK(alpha.numel() == 1, "dyt_native: alpha must have one element");
  DYT_CHECK(gamma.dim() == 1 && gamma.size(0) == C, "dyt_native: gamma must have shape (C,)");
  DYT_CHECK(!has_beta || (beta->dim() == 1 && beta->size(0) == C), "dyt_native: beta must have shape (C,)");
  DYT_CHECK(alpha.device() == x.device() && gamma.device() == x.device() &&
                (!has_beta || beta->device() == x.device()),
            "dyt_native: all tensors must be on one device");
}

// y's dtype: out_dtype where given, else x's.
at::ScalarType y_type_of(const at::Tensor& x, std::optional<at::ScalarType> out_dtype) {
  at::ScalarType t = out_dtype.value_or(x.scalar_type());
  DYT_CHECK(supported(t), "dyt_native: out_dtype must be float32, bfloat16 or float16");
  return t;
}

// x in a row layout (the Python caller checks row_layout); alpha one element; gamma, beta (C,); y in
// out_dtype (x's dtype where none).
at::Tensor forward_cuda(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma_in,
                        const std::optional<at::Tensor>& beta_in, bool channels_first, bool poison,
                        std::optional<at::ScalarType> out_dtype) {
  check_inputs(x, alpha, gamma_in, beta_in, channels_first);
  at::ScalarType y_type = y_type_of(x, out_dtype);
  DYT_CHECK(x.is_cuda(), "dyt_native: x must be a CUDA tensor (other devices take dyt's Python path)");
  DYT_CHECK(row_layout(x), "dyt_native: x must be contiguous or a 2-D view with unit column stride");
  at::Tensor gamma = contiguous_param(gamma_in);
  std::optional<at::Tensor> beta;
  if (beta_in.has_value() && beta_in->defined()) beta = contiguous_param(*beta_in);
  c10::DeviceGuard device_guard(x.device());
  if (x.numel() == 0) return std::get<0>(fill_forward(x, alpha, gamma, beta, channels_first, poison, y_type));
  Key key = forward_key(x, alpha, gamma, beta, channels_first, y_type);
  if (auto hit = forward_cache().find(key)) {
    at::Tensor y = output(x.sizes(), x.options().dtype(y_type), poison);
    void* b = beta.has_value() ? beta->data_ptr() : gamma.data_ptr();
    launch_on(hit->kernel, {x.data_ptr(), y.data_ptr(), alpha.data_ptr(), gamma.data_ptr(), b}, x.device());
    return y;
  }
  auto [y, record] = fill_forward(x, alpha, gamma, beta, channels_first, poison, y_type);
  if (!record.empty()) forward_cache().put(key, read_forward(record));
  return y;
}

// packed_grad: where given, alpha, gamma and beta are regions of one packed parameter that packed_fits,
// the parameter gradients are laid out as that parameter is, and a hit sets *packed_grad to the whole
// block (a miss leaves it undefined: the caller joins the gradients itself).
Grads backward_cuda(const at::Tensor& dy_in, const at::Tensor& x, const at::Tensor& alpha,
                    const at::Tensor& gamma, const std::optional<at::Tensor>& beta, bool channels_first,
                    bool poison, at::Tensor* packed_grad = nullptr) {
  DYT_CHECK(dy_in.sizes() == x.sizes(), "dyt: dy must have x's shape ", x.sizes(), ", got ", dy_in.sizes());
  at::Tensor dy = (!channels_first && row_layout(dy_in)) || dy_in.is_contiguous() ? dy_in : dy_in.contiguous();
  c10::DeviceGuard device_guard(x.device());
  Key key = backward_key(dy, x, alpha, gamma, beta, channels_first);
  auto hit = x.numel() ? backward_cache().find(key) : nullptr;
  if (!hit) {
    auto [dx, dalpha, dgamma, dbeta, record] = fill_backward(dy, x, alpha, gamma, beta, channels_first, poison);
    if (!record.empty()) backward_cache().put(key, read_backward(record));
    return {dx, dalpha, dgamma, dbeta};
  }
  const BackwardRecord& r = *hit;
  int64_t C = channels_first && x.dim() != 2 ? x.size(1) : x.size(-1);
  at::ScalarType dbeta_type = beta.has_value() ? beta->scalar_type() : gamma.scalar_type();
  int64_t dbeta_bytes = C * static_cast<int64_t>(c10::elementSize(dbeta_type));
  Scratch layout = scratch_layout(r.finish_rows, r.partial_width, r.n_dalpha, beta.has_value(), dbeta_bytes);
  ParamGrads grads_layout =
      param_grads_layout(static_cast<int64_t>(c10::elementSize(alpha.scalar_type())),
                         C * static_cast<int64_t>(c10::elementSize(gamma.scalar_type())), dbeta_bytes,
                         beta.has_value(), packed_grad != nullptr);
  // Two allocations: dx with the scratch after it (freed with dx), and the parameter gradients as
  // regions of one block (they share a storage, as the gradients that CatBackward returns do).
  int64_t scratch_at = round_up(x.numel() * static_cast<int64_t>(x.element_size()));
  at::Tensor dx_block = block(scratch_at + layout.bytes, x.options(), poison);
  at::Tensor grads_block = block(grads_layout.bytes, x.options(), poison);
  at::Tensor dx = region(dx_block, 0, x.sizes(), x.scalar_type());
  at::Tensor dalpha = region(grads_block, grads_layout.dalpha, alpha.sizes(), alpha.scalar_type());
  at::Tensor dgamma = region(grads_block, grads_layout.dgamma, {C}, gamma.scalar_type());
  at::Tensor dbeta = beta.has_value() ? region(grads_block, grads_layout.dbeta, {C}, dbeta_type) : at::Tensor();
  char* base = static_cast<char*>(dx_block.data_ptr()) + scratch_at;
  Slots slots{x.data_ptr(),  dy.data_ptr(), dx.data_ptr(), alpha.data_ptr(), gamma.data_ptr(),
              base + layout.part_dgamma, base + layout.part_dbeta, base + layout.part_dalpha,
              dgamma.data_ptr(), beta.has_value() ? dbeta.data_ptr() : base + layout.dbeta, dalpha.data_ptr()};
  launch_on(r.main, slots, x.device());
  launch_on(r.finish, slots, x.device());
  if (packed_grad != nullptr) {
    int64_t elements = grads_layout.bytes / static_cast<int64_t>(c10::elementSize(gamma.scalar_type()));
    *packed_grad = region(grads_block, 0, {elements}, gamma.scalar_type());
  }
  return {dx, dalpha, dgamma, dbeta};
}

// ---- autograd ---------------------------------------------------------------------------------------
//
// The backward nodes are written as PyTorch's generated ones are: a Node holding SavedVariables, made with
// its edges before the forward runs, the output's history set after (a torch::autograd::Function's CppNode
// also copies every input's and output's metadata, keeps its flags in a string-keyed map and wraps its
// outputs: docs/host-path.md, "Native path"). Invariant: a node has one next edge per differentiable input
// in the op's argument order (x, alpha, gamma, beta; x, params), and its apply returns one gradient per edge.

// Edge::function's pointer type: std::shared_ptr<Node> in some PyTorch releases, c10::intrusive_ptr<Node>
// in others; make_node makes a T behind whichever it is (Node's own deleter frees long chains of nodes
// without recursion).
using NodePtr = decltype(torch::autograd::Edge::function);

template <typename T>
auto make_node() {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::shared_ptr<T>(new T(), [](T* node) { deleteNode(node); });  // found by ADL, at instantiation
  } else {
    return c10::make_intrusive<T>();
  }
}

// Whether autograd must see a call with this input: grad mode on and the input requiring grad.
bool requires_grad(const at::Tensor& t) { return t.defined() && at::GradMode::is_enabled() && t.requires_grad(); }

// A forward-mode tangent on any input is refused (the nodes have no jvp), also where autograd records
// nothing, so that no tangent is dropped in silence; dyt.dyt hands the op none (it runs such calls on
// dyt.ops._ComposableDyT).
void refuse_tangents(std::initializer_list<const at::Tensor*> inputs) {
  for (const at::Tensor* t : inputs)
    DYT_CHECK(!t->defined() || !t->_fw_grad(0).defined(),
              "dyt_native: forward-mode AD (jvp) is not implemented by the native op; dyt.dyt runs "
              "calls with tangents on its composable path");
}

// What the two nodes share: their flags, and what the engine and compiled autograd ask of a node, over the
// node's saved tensors (Derived::saved(): its SavedVariables in the order apply_functional unpacks them).
// Compiled autograd (torch._dynamo.compiled_autograd) puts a node into its graph as one opaque call, as it
// puts a torch::autograd::Function's: compiled_args collects what the graph depends on, and
// apply_with_saved binds Derived::apply_functional as the call, with the saved tensors and then the flags
// as its arguments.
template <typename Derived>
struct NativeNode : public torch::autograd::Node {
  bool has_beta = false, channels_first = false, poison = false;

  auto saved_variables() const { return const_cast<Derived&>(static_cast<const Derived&>(*this)).saved(); }

  std::vector<at::IValue> packed_args() const {
    std::vector<at::IValue> args;
    for (const auto* v : saved_variables()) args.emplace_back(v->unpack());
    args.insert(args.end(), {has_beta, channels_first, poison});
    return args;
  }
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(name());
    for (const auto* v : saved_variables()) args.collect(*v, false);
    args.collect(has_beta);
    args.collect(channels_first);
    args.collect(poison);
  }
  torch::autograd::variable_list apply_with_saved(const torch::autograd::variable_list& grads,
                                                  torch::dynamo::autograd::SwapSavedVariables& saved) override {
    namespace ca = torch::dynamo::autograd;
    for (auto* v : saved_variables()) saved.before(*v);
    std::vector<at::IValue> args = packed_args();
    std::vector<at::TypePtr> schema;
    schema.reserve(args.size());
    for (const at::IValue& arg : args) schema.push_back(arg.isTensor() ? at::TensorType::get() : arg.type());
    auto output_metadata = ca::IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
        ca::get_input_metadata(next_edges()));
    const auto& compiler = ca::getPyCompilerInterface();
    std::string fn = compiler->bind_function(saved.get_py_compiler(), name(), &Derived::apply_functional, schema,
                                             /*is_custom_function=*/true, /*is_traceable=*/false);
    auto result =
        compiler->call_function(saved.get_py_compiler(), "apply_functional", fn, grads, args, output_metadata);
    for (auto* v : saved_variables()) saved.after(*v);
    return result;
  }
  void release_variables() override {
    for (auto* v : saved_variables()) v->reset_data();
  }
};

struct DyTBackward : public NativeNode<DyTBackward> {
  torch::autograd::SavedVariable x, alpha, gamma, beta;  // gamma and beta contiguous; beta empty without one
  std::array<torch::autograd::SavedVariable*, 4> saved() { return {&x, &alpha, &gamma, &beta}; }

  // The gradients of (x, alpha, gamma, beta) from y's; none where y's is undefined (a zero gradient).
  static torch::autograd::variable_list gradients(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& alpha,
                                                  const at::Tensor& gamma, const at::Tensor& beta,
                                                  bool channels_first, bool poison) {
    if (!dy.defined()) return torch::autograd::variable_list(4);
    std::optional<at::Tensor> beta_;
    if (beta.defined()) beta_ = beta;
    // create_graph=True (grad mode on here) runs the differentiable expression, which autograd records:
    // the kernels' gradients are not differentiable again.
    auto [dx, dalpha, dgamma, dbeta] =
        at::GradMode::is_enabled() ? differentiable_backward(dy, x, alpha, gamma, beta_, channels_first)
                                   : backward_cuda(dy, x, alpha, gamma, beta_, channels_first, poison);
    if (dalpha.sizes() != alpha.sizes()) dalpha = dalpha.reshape(alpha.sizes());
    return {dx, dalpha, dgamma, beta.defined() ? dbeta : at::Tensor()};
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    return gradients(grads[0], x.unpack(), alpha.unpack(), gamma.unpack(), has_beta ? beta.unpack() : at::Tensor(),
                     channels_first, poison);
  }

  static torch::autograd::variable_list apply_functional(const torch::autograd::variable_list& grads,
                                                         const std::vector<at::IValue>& args) {
    return gradients(grads[0], args[0].toTensor(), args[1].toTensor(), args[2].toTensor(),
                     args[3].isTensor() ? args[3].toTensor() : at::Tensor(), args[5].toBool(), args[6].toBool());
  }
  std::string name() const override { return "dyt_native::DyTBackward"; }
};

// Where autograd need not record the call (no_grad, or no input requiring grad), the forward runs as it is,
// with no node made.
at::Tensor dyt_autograd(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                        const std::optional<at::Tensor>& beta, bool channels_first, bool poison,
                        std::optional<at::ScalarType> out_dtype) {
  bool has_beta = beta.has_value() && beta->defined();
  at::Tensor no_beta;
  const at::Tensor& beta_or_none = has_beta ? *beta : no_beta;
  refuse_tangents({&x, &alpha, &gamma, &beta_or_none});
  bool recorded = requires_grad(x) || requires_grad(alpha) || requires_grad(gamma) || requires_grad(beta_or_none);
  at::Tensor gamma_c = contiguous_param(gamma);
  std::optional<at::Tensor> beta_c;
  if (has_beta) beta_c = contiguous_param(*beta);
  if (!recorded) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_cuda(x, alpha, gamma_c, beta_c, channels_first, poison, out_dtype);
  }
  auto node = make_node<DyTBackward>();
  node->set_next_edges(torch::autograd::collect_next_edges(x, alpha, gamma, beta_or_none));
  at::Tensor y;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    y = forward_cuda(x, alpha, gamma_c, beta_c, channels_first, poison, out_dtype);
  }
  // Only x is kept among activation-sized tensors: y and tanh are recomputed in the backward.
  node->x = torch::autograd::SavedVariable(x, false);
  node->alpha = torch::autograd::SavedVariable(alpha, false);
  node->gamma = torch::autograd::SavedVariable(gamma_c, false);
  if (has_beta) node->beta = torch::autograd::SavedVariable(*beta_c, false);
  node->has_beta = has_beta;
  node->channels_first = channels_first;
  node->poison = poison;
  torch::autograd::set_history(y, node);
  return y;
}

// ---- packed parameters ----------------------------------------------------------------------------
//
// `dyt_packed(x, params, has_beta, ...)`: alpha, gamma and beta in one 1-D tensor laid out as
// [gamma (C), beta (C) where has_beta, alpha (1)] (dyt.ops.split_params), so that a layer has one
// parameter, one gradient for autograd to accumulate and one tensor of optimizer state. The kernels take
// regions of it (no autograd views); the backward returns its gradient as one block where packed_fits,
// else the three gradients joined (the same values: only the allocation differs).

struct Unpacked {
  at::Tensor alpha, gamma;
  std::optional<at::Tensor> beta;
};

int64_t packed_channels(const at::Tensor& params, bool has_beta) {
  return (params.numel() - 1) / (has_beta ? 2 : 1);
}

// Refuses every input that dyt.ops.validate_packed refuses (tests/test_native.py holds the two to the
// same cases); check_inputs then holds the regions to the rest.
void check_packed(const at::Tensor& x, const at::Tensor& params, bool has_beta, bool channels_first) {
  DYT_CHECK(supported(x.scalar_type()) && supported(params.scalar_type()),
            "dyt_native: x and params must be float32, bfloat16 or float16");
  DYT_CHECK(x.dim() >= (channels_first ? 2 : 1), "dyt_native: x has too few dimensions");
  int64_t C = x.size(channels_first ? 1 : x.dim() - 1);
  DYT_CHECK(C >= 1, "dyt_native: x has no channels");
  DYT_CHECK(params.dim() == 1 && params.size(0) == C * (has_beta ? 2 : 1) + 1,
            "dyt_native: params must have shape (2C+1,) with beta, (C+1,) without");
  DYT_CHECK(params.device() == x.device(), "dyt_native: all tensors must be on one device");
}

// Regions of a contiguous packed parameter (checked by check_packed).
Unpacked unpack(const at::Tensor& params, bool has_beta) {
  int64_t C = packed_channels(params, has_beta);
  at::ScalarType dtype = params.scalar_type();
  int64_t size = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t at = params.storage_offset() * size;
  Unpacked u;
  u.gamma = region(params, at, {C}, dtype);
  if (has_beta) u.beta = region(params, at + C * size, {C}, dtype);
  u.alpha = region(params, at + (has_beta ? 2 : 1) * C * size, {1}, dtype);
  return u;
}

// Whether every region of params, and of the packed gradient block, is 16-byte aligned as the kernels'
// outputs always are: a record made for separate outputs then holds for the packed ones.
bool packed_fits(const at::Tensor& params, bool has_beta) {
  return packed_channels(params, has_beta) * params.element_size() % 16 == 0 && aligned(params);
}

at::Tensor join_grads(const at::Tensor& dalpha, const at::Tensor& dgamma, const at::Tensor& dbeta, bool has_beta) {
  at::Tensor dalpha1 = dalpha.reshape({1});
  return has_beta ? at::cat({dgamma, dbeta, dalpha1}) : at::cat({dgamma, dalpha1});
}

at::Tensor forward_packed_cuda(const at::Tensor& x, const at::Tensor& params, bool has_beta, bool channels_first,
                               bool poison, std::optional<at::ScalarType> out_dtype) {
  check_packed(x, params, has_beta, channels_first);
  Unpacked u = unpack(contiguous_param(params), has_beta);
  return forward_cuda(x, u.alpha, u.gamma, u.beta, channels_first, poison, out_dtype);
}

struct DyTPackedBackward : public NativeNode<DyTPackedBackward> {
  torch::autograd::SavedVariable x, params;
  std::array<torch::autograd::SavedVariable*, 2> saved() { return {&x, &params}; }

  // The gradients of (x, params) from y's; none where y's is undefined (a zero gradient).
  static torch::autograd::variable_list gradients(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& params,
                                                  bool has_beta, bool channels_first, bool poison) {
    if (!dy.defined()) return torch::autograd::variable_list(2);
    at::Tensor dx, dparams;
    if (at::GradMode::is_enabled()) {  // create_graph=True: views that autograd differentiates through
      int64_t C = packed_channels(params, has_beta);
      std::optional<at::Tensor> beta;
      if (has_beta) beta = params.narrow(0, C, C);
      auto [dx_, dalpha, dgamma, dbeta] = differentiable_backward(
          dy, x, params.narrow(0, (has_beta ? 2 : 1) * C, 1), params.narrow(0, 0, C), beta, channels_first);
      dx = dx_;
      dparams = join_grads(dalpha, dgamma, dbeta, has_beta);
    } else {
      at::Tensor p = contiguous_param(params);
      Unpacked u = unpack(p, has_beta);
      auto [dx_, dalpha, dgamma, dbeta] = backward_cuda(dy, x, u.alpha, u.gamma, u.beta, channels_first, poison,
                                                        packed_fits(p, has_beta) ? &dparams : nullptr);
      dx = dx_;
      if (!dparams.defined()) dparams = join_grads(dalpha, dgamma, dbeta, has_beta);
    }
    return {dx, dparams};
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    return gradients(grads[0], x.unpack(), params.unpack(), has_beta, channels_first, poison);
  }

  static torch::autograd::variable_list apply_functional(const torch::autograd::variable_list& grads,
                                                         const std::vector<at::IValue>& args) {
    return gradients(grads[0], args[0].toTensor(), args[1].toTensor(), args[2].toBool(), args[3].toBool(),
                     args[4].toBool());
  }
  std::string name() const override { return "dyt_native::DyTPackedBackward"; }
};

at::Tensor dyt_packed_autograd(const at::Tensor& x, const at::Tensor& params, bool has_beta, bool channels_first,
                               bool poison, std::optional<at::ScalarType> out_dtype) {
  refuse_tangents({&x, &params});
  if (!requires_grad(x) && !requires_grad(params)) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return forward_packed_cuda(x, params, has_beta, channels_first, poison, out_dtype);
  }
  auto node = make_node<DyTPackedBackward>();
  node->set_next_edges(torch::autograd::collect_next_edges(x, params));
  at::Tensor y;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    y = forward_packed_cuda(x, params, has_beta, channels_first, poison, out_dtype);
  }
  node->x = torch::autograd::SavedVariable(x, false);
  node->params = torch::autograd::SavedVariable(params, false);
  node->has_beta = has_beta;
  node->channels_first = channels_first;
  node->poison = poison;
  torch::autograd::set_history(y, node);
  return y;
}

// ---- what tests and tools see ---------------------------------------------------------------------

// The values a record's launches would pass, for the tensors given in slot order (CPU tensors work:
// only their addresses are read): per launch, one int64 per parameter.
std::vector<int64_t> packed_arguments(const std::vector<int64_t>& record, bool backward,
                                      at::TensorList tensors) {
  std::vector<Launch> launches;
  if (backward) {
    BackwardRecord r = read_backward(record);
    launches = {r.main, r.finish};
  } else {
    launches = {read_forward(record).kernel};
  }
  Slots slots{};
  DYT_CHECK(tensors.size() == static_cast<size_t>(backward ? kBackwardSlots : kForwardSlots),
              "dyt_native: packed_arguments wants one tensor per slot");
  for (size_t i = 0; i < tensors.size(); ++i) slots[i] = tensors[i].data_ptr();
  std::vector<int64_t> out;
  for (const Launch& launch : launches) {
    Packed packed;
    pack(launch, slots, packed);
    for (size_t i = 0; i < packed.n; ++i) {
      const Param& p = launch.params[i];
      int64_t passed = p.kind == kInt32 ? *static_cast<int32_t*>(packed.pointers[i])
                                        : *static_cast<int64_t*>(packed.pointers[i]);
      out.push_back(passed);
    }
  }
  return out;
}

int64_t cache_entries(bool backward) {
  return backward ? backward_cache().size() : forward_cache().size();
}

void clear_cache() {
  forward_cache().clear();
  backward_cache().clear();
}

// Stores a record as a miss would, for tests of the cache itself (the key from these tensors and y's
// dtype, out_dtype or x's).
void store_forward_record(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                          const std::optional<at::Tensor>& beta, bool channels_first,
                          const std::vector<int64_t>& record, std::optional<at::ScalarType> out_dtype) {
  Key key = forward_key(x, alpha, gamma, beta, channels_first, y_type_of(x, out_dtype));
  forward_cache().put(key, read_forward(record));
}

bool has_forward_record(const at::Tensor& x, const at::Tensor& alpha, const at::Tensor& gamma,
                        const std::optional<at::Tensor>& beta, bool channels_first,
                        std::optional<at::ScalarType> out_dtype) {
  Key key = forward_key(x, alpha, gamma, beta, channels_first, y_type_of(x, out_dtype));
  return forward_cache().find(key) != nullptr;
}

// The parameter gradients' block: byte offsets (dalpha, dgamma, dbeta or -1) and size.
std::vector<int64_t> param_grads_block(int64_t dalpha_bytes, int64_t dgamma_bytes, int64_t dbeta_bytes,
                                       bool has_beta, bool packed) {
  ParamGrads g = param_grads_layout(dalpha_bytes, dgamma_bytes, dbeta_bytes, has_beta, packed);
  return {g.dalpha, g.dgamma, g.dbeta, g.bytes};
}

// The backward scratch's byte offsets (part_dalpha, part_dgamma, part_dbeta, dbeta or -1) and size.
std::vector<int64_t> backward_scratch(int64_t finish_rows, int64_t partial_width, int64_t n_dalpha,
                                      bool has_beta, int64_t dbeta_bytes) {
  Scratch s = scratch_layout(finish_rows, partial_width, n_dalpha, has_beta, dbeta_bytes);
  return {s.part_dalpha, s.part_dgamma, s.part_dbeta, s.dbeta, s.bytes};
}

}  // namespace dyt_native

TORCH_LIBRARY(dyt_native, m) {
  m.def("dyt(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta, bool channels_first, bool poison,"
        " ScalarType? out_dtype=None) -> Tensor");
  m.def("dyt_packed(Tensor x, Tensor params, bool has_beta, bool channels_first, bool poison,"
        " ScalarType? out_dtype=None) -> Tensor");
  m.def("fill_forward(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta, bool channels_first, bool poison,"
        " ScalarType out_dtype) -> (Tensor, int[])");
  m.def("fill_backward(Tensor dy, Tensor x, Tensor alpha, Tensor gamma, Tensor? beta, bool channels_first,"
        " bool poison) -> (Tensor, Tensor, Tensor, Tensor, int[])");
  m.def("differentiable_backward(Tensor dy, Tensor x, Tensor alpha, Tensor gamma, Tensor? beta,"
        " bool channels_first) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("packed_arguments(int[] record, bool backward, Tensor[] tensors) -> int[]",
        &dyt_native::packed_arguments);
  m.def("cache_entries(bool backward) -> int", &dyt_native::cache_entries);
  m.def("clear_cache() -> ()", &dyt_native::clear_cache);
  m.def("store_forward_record(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta, bool channels_first,"
        " int[] record, ScalarType? out_dtype=None) -> ()",
        &dyt_native::store_forward_record);
  m.def("has_forward_record(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta, bool channels_first,"
        " ScalarType? out_dtype=None) -> bool",
        &dyt_native::has_forward_record);
  m.def("backward_scratch(int finish_rows, int partial_width, int n_dalpha, bool has_beta, int dbeta_bytes)"
        " -> int[]",
        &dyt_native::backward_scratch);
  m.def("param_grads_block(int dalpha_bytes, int dgamma_bytes, int dbeta_bytes, bool has_beta, bool packed)"
        " -> int[]",
        &dyt_native::param_grads_block);
}

TORCH_LIBRARY_IMPL(dyt_native, CUDA, m) {
  m.impl("dyt", &dyt_native::forward_cuda);
  m.impl("dyt_packed", &dyt_native::forward_packed_cuda);
}

TORCH_LIBRARY_IMPL(dyt_native, Autograd, m) {
  m.impl("dyt", &dyt_native::dyt_autograd);
  m.impl("dyt_packed", &dyt_native::dyt_packed_autograd);
}

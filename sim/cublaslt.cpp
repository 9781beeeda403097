// cuBLASLt on the simulated GPU: a reference implementation of exactly the calls
// src/backend/cuda/gemm.cpp makes (plus the cuBLAS handle calls of kernels/device_info.cpp).
//   D (m x n) = alpha * op(A) op(B) + beta * C  [+ bias (m), epilogue BIAS]
// column-major with leading dimensions, A and B bf16, C and D bf16 or float32, float32
// accumulation (products of bf16 are exact in float32; the float32 product is OpenBLAS's sgemm of
// the widened operands), one rounding to D's type.
// Refused as the library documents rather than computed: a leading dimension below its rows, a
// shape or type combination it does not support, an operand less aligned than the heuristic was
// promised (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256), a handle used on another
// device. Operands must lie inside one allocation of the current device.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cblas.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sim/simulator.hpp"

struct cublasLtContext {
  int device;
};
struct cublasContext {
  int device;
};

namespace layertap::sim {
namespace {

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cudaDataType_t bias_type = CUDA_R_16BF;
  bool bias_type_set = false;
  const void* bias = nullptr;
};
struct Layout {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
struct Pref {
  std::uint64_t workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
  std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK;
};

Desc& desc(cublasLtMatmulDesc_t d) { return *reinterpret_cast<Desc*>(d); }
Layout& layout(cublasLtMatrixLayout_t l) { return *reinterpret_cast<Layout*>(l); }
Pref& pref(cublasLtMatmulPreference_t p) { return *reinterpret_cast<Pref*>(p); }

cublasStatus_t refuse(cublasStatus_t st, const std::string& call, const std::string& why) {
  report(call + ": " + why);
  return st;
}

std::size_t element_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

template <class T>
bool read_attr(const void* buf, std::size_t size, T& out) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

// The product's shape and the checks shared by the heuristic and the matmul.
struct Shape {
  std::uint64_t m = 0, n = 0, k = 0;
};
cublasStatus_t check_problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl,
                             const char* call, Shape& s) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "only CUBLAS_COMPUTE_32F with CUDA_R_32F scales is simulated");
  }
  if (a.type != CUDA_R_16BF || b.type != CUDA_R_16BF || (dl.type != CUDA_R_16BF && dl.type != CUDA_R_32F) ||
      c.type != dl.type) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "only bf16 A and B, and C = D of bf16 or float32, are simulated");
  }
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "only the DEFAULT and BIAS epilogues are simulated");
  }
  for (const Layout* l : {&a, &b, &c, &dl}) {
    if (l->ld < 0 || std::uint64_t(l->ld) < l->rows || l->rows == 0 || l->cols == 0) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    "a layout of " + std::to_string(l->rows) + " x " + std::to_string(l->cols) +
                        " has leading dimension " + std::to_string(l->ld) + " (at least its rows)");
    }
  }
  s.m = dl.rows;
  s.n = dl.cols;
  const std::uint64_t am = d.transa == CUBLAS_OP_N ? a.rows : a.cols, ak = d.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const std::uint64_t bk = d.transb == CUBLAS_OP_N ? b.rows : b.cols, bn = d.transb == CUBLAS_OP_N ? b.cols : b.rows;
  s.k = ak;
  if (am != s.m || bn != s.n || bk != ak || c.rows != dl.rows || c.cols != dl.cols || c.ld != dl.ld) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "shapes do not compose: op(A) " + std::to_string(am) + " x " + std::to_string(ak) + ", op(B) " +
                      std::to_string(bk) + " x " + std::to_string(bn) + ", D " + std::to_string(dl.rows) + " x " +
                      std::to_string(dl.cols));
  }
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && d.bias_type_set && d.bias_type != CUDA_R_16BF && d.bias_type != dl.type) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "bias type must be bf16 or D's type");
  }
  return CUBLAS_STATUS_SUCCESS;
}

std::uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

double type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4.0 : 2.0; }

float to_float(const std::byte* base, std::size_t i, cudaDataType_t t) {
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, base + 4 * i, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, base + 2 * i, 2);
  return std::bit_cast<float>(std::uint32_t(h) << 16);
}

void store(std::byte* base, std::size_t i, cudaDataType_t t, float v) {
  if (t == CUDA_R_32F) {
    std::memcpy(base + 4 * i, &v, 4);
    return;
  }
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  std::memcpy(base + 2 * i, &h, 2);
}

// The operand [p, p + extent) must be device memory of `device`; returns its allocation.
AllocationRef operand(const void* p, const Layout& l, int device, const char* role, std::string& error) {
  const std::size_t extent = (std::size_t(l.ld) * (l.cols - 1) + l.rows) * element_bytes(l.type);
  AllocationRef a = find_allocation(p, 0);
  if (!a || a->device != device) {
    error = std::string(role) + " is not device memory of device " + std::to_string(device);
    return nullptr;
  }
  if (!find_allocation(p, extent)) {
    error = std::string(role) + ": " + std::to_string(extent) + " bytes (" + std::to_string(l.rows) + " x " +
            std::to_string(l.cols) + ", leading dimension " + std::to_string(l.ld) +
            ") run past the end of its allocation";
    return nullptr;
  }
  return a;
}

}  // namespace
}  // namespace layertap::sim

using namespace layertap::sim;

extern "C" {

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  if (h == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (device_count() == 0) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate", "no device is visible");
  *h = new cublasContext{current_device()};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int* v) {
  if (h == nullptr || v == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *v = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (h == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (device_count() == 0) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate", "no device is visible");
  *h = new cublasLtContext{current_device()};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<Desc*>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& x = desc(d);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = read_attr(buf, size, x.transa); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = read_attr(buf, size, x.transb); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = read_attr(buf, size, x.epilogue); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read_attr(buf, size, x.bias); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = x.bias_type_set = read_attr(buf, size, x.bias_type); break;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescSetAttribute",
                    "attribute " + std::to_string(int(attr)) + " is not simulated");
  }
  return ok ? CUBLAS_STATUS_SUCCESS
            : refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute", "wrong buffer size");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<Layout*>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref{});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<Pref*>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Pref& x = pref(p);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = read_attr(buf, size, x.workspace); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ok = read_attr(buf, size, x.align[0]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ok = read_attr(buf, size, x.align[1]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ok = read_attr(buf, size, x.align[2]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ok = read_attr(buf, size, x.align[3]); break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: ok = read_attr(buf, size, x.reductions); break;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulPreferenceSetAttribute",
                    "attribute " + std::to_string(int(attr)) + " is not simulated");
  }
  return ok ? CUBLAS_STATUS_SUCCESS
            : refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute", "wrong buffer size");
}

// One algorithm, without split-K (so any reduction scheme mask admits it) and without workspace,
// valid for operands aligned as the preference promises; none when it promises less than an element.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  if (h == nullptr || d == nullptr || a == nullptr || b == nullptr || c == nullptr || dl == nullptr || p == nullptr ||
      results == nullptr || found == nullptr || requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  *found = 0;
  Shape s;
  if (const cublasStatus_t st = check_problem(desc(d), layout(a), layout(b), layout(c), layout(dl),
                                              "cublasLtMatmulAlgoGetHeuristic", s);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  const Pref& x = pref(p);
  const Layout* ls[4] = {&layout(a), &layout(b), &layout(c), &layout(dl)};
  for (int i = 0; i < 4; ++i) {
    if (x.align[i] < element_bytes(ls[i]->type)) return CUBLAS_STATUS_NOT_SUPPORTED;  // no algorithm
  }
  std::memset(&results[0], 0, sizeof results[0]);
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = x.align[i];
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  (void)workspace;
  (void)workspace_bytes;
  const char* call = "cublasLtMatmul";
  if (h == nullptr || d == nullptr || a == nullptr || b == nullptr || c == nullptr || dl == nullptr ||
      alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || D == nullptr || algo == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "null argument");
  if (device_count() == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  Device& dev = current();
  if (h->device != dev.index) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                  "the handle was created on device " + std::to_string(h->device) +
                      " but the calling thread's current device is " + std::to_string(dev.index));
  }
  if (dev.sticky.load() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  const Desc x = desc(d);
  const Layout la = layout(a), lb = layout(b), lc = layout(c), ld = layout(dl);
  Shape s;
  if (const cublasStatus_t st = check_problem(x, la, lb, lc, ld, call, s); st != CUBLAS_STATUS_SUCCESS) return st;
  const void* ptrs[4] = {A, B, C, D};
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    if (ptrs[i] == nullptr) continue;
    if (alignment_of(ptrs[i]) < algo->data[i]) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                    std::string(names[i]) + " is " + std::to_string(alignment_of(ptrs[i])) +
                        "-byte aligned; the algorithm was chosen for " + std::to_string(algo->data[i]) + " bytes");
    }
  }
  const float fa = *static_cast<const float*>(alpha), fb = *static_cast<const float*>(beta);
  std::string error;
  std::vector<AllocationRef> uses;
  const Layout* lays[4] = {&la, &lb, &lc, &ld};
  for (int i = 0; i < 4; ++i) {
    if (ptrs[i] == nullptr) continue;
    if (AllocationRef r = operand(ptrs[i], *lays[i], dev.index, names[i], error)) {
      uses.push_back(r);
    } else {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, error);
    }
  }
  const bool bias = x.epilogue == CUBLASLT_EPILOGUE_BIAS;
  const cudaDataType_t bias_type = x.bias_type_set ? x.bias_type : CUDA_R_16BF;
  if (bias) {
    const Layout bl{bias_type, s.m, 1, std::int64_t(s.m)};
    if (AllocationRef r = operand(x.bias, bl, dev.index, "bias", error)) {
      uses.push_back(r);
    } else {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, call, error);
    }
  }
  cudaStream_t st = resolve_stream(stream, dev, call);
  if (st == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  dev.count.matmuls++;
  {
    Call r;
    r.kind = CallKind::Matmul;
    r.name = "cublasLtMatmul";
    r.m = std::int64_t(s.m);
    r.n = std::int64_t(s.n);
    r.k = std::int64_t(s.k);
    const double mk = double(s.m) * double(s.k), kn = double(s.k) * double(s.n), mn = double(s.m) * double(s.n);
    r.work.read = mk * type_bytes(la.type) + kn * type_bytes(lb.type) + (fb != 0.0f ? mn * type_bytes(lc.type) : 0) +
                  (bias ? double(s.m) * type_bytes(bias_type) : 0);
    r.work.written = mn * type_bytes(ld.type);
    r.work.flops = 2.0 * mk * double(s.n);
    r.stream = st->id;
    record(dev, std::move(r));
  }
  if (dev.cost_only) return CUBLAS_STATUS_SUCCESS;
  const void* bias_ptr = x.bias;
  st->enqueue(Op{
      std::string(call) + " " + std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k),
      [=] {
        const auto* pa = static_cast<const std::byte*>(A);
        const auto* pb = static_cast<const std::byte*>(B);
        const auto* pc = static_cast<const std::byte*>(C);
        auto* pd = static_cast<std::byte*>(D);
        // op(A) as (m, k) and op(B) as (k, n), row-major, widened to float32; P = op(A) op(B).
        std::vector<float> ra(s.m * s.k), rb(s.k * s.n), p(s.m * s.n);
        for (std::uint64_t i = 0; i < s.m; ++i)
          for (std::uint64_t k = 0; k < s.k; ++k)
            ra[i * s.k + k] = to_float(pa, x.transa == CUBLAS_OP_N ? i + k * la.ld : k + i * la.ld, la.type);
        for (std::uint64_t k = 0; k < s.k; ++k)
          for (std::uint64_t j = 0; j < s.n; ++j)
            rb[k * s.n + j] = to_float(pb, x.transb == CUBLAS_OP_N ? k + j * lb.ld : j + k * lb.ld, lb.type);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f, ra.data(),
                    int(s.k), rb.data(), int(s.n), 0.0f, p.data(), int(s.n));
        for (std::uint64_t j = 0; j < s.n; ++j) {
          for (std::uint64_t i = 0; i < s.m; ++i) {
            float v = fa * p[i * s.n + j];
            if (fb != 0.0f) v += fb * to_float(pc, i + j * lc.ld, lc.type);
            if (bias) v += to_float(static_cast<const std::byte*>(bias_ptr), i, bias_type);
            store(pd, i + j * ld.ld, ld.type, v);
          }
        }
      },
      std::move(uses)});
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

#include "store_ranges.h"
#include "../clproj_settings.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>

#include <llvm/IR/Argument.h>
#include <llvm/IR/Type.h>
#include <llvm/Support/Casting.h>

#include <oclgrind/Context.h>
#include <oclgrind/Kernel.h>
#include <oclgrind/KernelInvocation.h>
#include <oclgrind/Memory.h>

namespace clproj {

namespace {

constexpr unsigned kAddressGlobal = 0x119B;    // CL_KERNEL_ARG_ADDRESS_GLOBAL
constexpr unsigned kAddressConstant = 0x119D;  // CL_KERNEL_ARG_ADDRESS_CONSTANT

struct Range {
  uint64_t lo = UINT64_MAX, hi = 0, store_bytes = 0, load_bytes = 0, atomics = 0;
};

const bool g_enabled = clproj_setting_store_ranges() != 0;

// Written in kernelBegin (before any group runs), only read while groups run.
std::map<size_t, int> g_buffer_arg;
thread_local std::map<size_t, Range> t_ranges;  // buffer id -> range of the running group

}  // namespace

bool storeRangesEnabled() { return g_enabled; }

void storeRangesKernelBegin(const oclgrind::Context *context, const oclgrind::KernelInvocation *inv) {
  if (!g_enabled) return;
  g_buffer_arg.clear();
  const oclgrind::Kernel *kernel = inv->getKernel();
  const oclgrind::Memory *global = context->getGlobalMemory();
  for (auto it = kernel->values_begin(); it != kernel->values_end(); ++it) {
    const auto *arg = llvm::dyn_cast<llvm::Argument>(it->first);
    if (arg == nullptr || !arg->getType()->isPointerTy() || it->second.data == nullptr) continue;
    unsigned qualifier = kernel->getArgumentAddressQualifier(arg->getArgNo());
    if (qualifier != kAddressGlobal && qualifier != kAddressConstant) continue;
    size_t ptr = it->second.getPointer();
    if (ptr == 0) continue;
    g_buffer_arg.emplace(global->extractBuffer(ptr), static_cast<int>(arg->getArgNo()));
  }
}

void storeRangesGroupBegin() {
  if (g_enabled) t_ranges.clear();
}

void storeRangesAccess(const oclgrind::Memory *memory, size_t address, size_t size, int kind) {
  if (!g_enabled || size == 0) return;
  Range &r = t_ranges[memory->extractBuffer(address)];
  if (kind == 0) {
    r.load_bytes += size;
    return;
  }
  uint64_t off = memory->extractOffset(address);
  if (off < r.lo) r.lo = off;
  if (off + size > r.hi) r.hi = off + size;
  if (kind == 1)
    r.store_bytes += size;
  else
    r.atomics++;
}

std::string storeRangesGroupJson() {
  if (!g_enabled) return "";
  std::ostringstream o;
  o << ",\"store_ranges\":[";
  bool first = true;
  for (const auto &[buffer, r] : t_ranges) {
    auto it = g_buffer_arg.find(buffer);
    o << (first ? "" : ",") << "{\"arg\":" << (it == g_buffer_arg.end() ? -1 : it->second)
      << ",\"lo\":" << (r.hi ? r.lo : 0) << ",\"hi\":" << r.hi
      << ",\"store_bytes\":" << r.store_bytes << ",\"load_bytes\":" << r.load_bytes
      << ",\"atomics\":" << r.atomics << "}";
    first = false;
  }
  o << "]";
  return o.str();
}

}  // namespace clproj

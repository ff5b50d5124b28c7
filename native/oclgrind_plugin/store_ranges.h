// Store ranges: per work-group, the byte range each global buffer argument was written in.
//
// Enabled by CLPROJ_STORE_RANGES=1 (otherwise every hook returns at once). Used by the
// partition advisor (runtime/partition/safety.py, docs/advisor.md) to check that
// work-groups write disjoint regions whose position is an affine function of the group id.
// Output: a "store_ranges" list on each {"type":"group"} line of the plugin output:
//   [{"arg":i,"lo":b,"hi":e,"store_bytes":n,"load_bytes":m,"atomics":k}, ...]
// lo/hi: first byte and one past the last byte written, relative to the buffer's start;
// arg: kernel argument index (-1: a buffer that is no argument, e.g. program scope).
#pragma once
#include <cstddef>
#include <string>

namespace oclgrind {
class Context;
class KernelInvocation;
class Memory;
}  // namespace oclgrind

namespace clproj {

bool storeRangesEnabled();
// Maps buffer ids to kernel argument indices; call in kernelBegin.
void storeRangesKernelBegin(const oclgrind::Context *context, const oclgrind::KernelInvocation *inv);
void storeRangesGroupBegin();
// kind: 0 load, 1 store, 2 atomic (global/constant address space only).
void storeRangesAccess(const oclgrind::Memory *memory, size_t address, size_t size, int kind);
// JSON fragment ",\"store_ranges\":[...]" for the finished group ("" when disabled).
std::string storeRangesGroupJson();

}  // namespace clproj
